//! The control API: HTTP/1.1 + JSON over a Unix socket (owner root, mode 0600), paths under
//! `/v1/`. The server turns requests into messages to the daemon's writer; the client is what
//! the CLI uses.
//!
//! Every route, its body and its answer are listed in docs/api.md (routes in [`server::router`],
//! types in [`types`]); a test (`lb-ctl/tests/docs.rs`) fails when a route is missing there.
//!
//! Errors answer `{"error": "..."}` with 400 (malformed request, invalid value, config with
//! mistakes), 404 (unknown VIP or backend, unknown path), 405, 409 (duplicate backend, no free
//! id), 500 (data plane failure) or 503 (a node in a fleet cannot reach etcd to make a
//! backend change there).
mod admission;
pub mod client;
pub mod request;
pub mod server;
mod status_page;
pub mod trace;
pub mod types;

pub use request::{Request, Response, Service};

use axum::http::StatusCode;
use axum::response::{IntoResponse, Json};

use crate::config::rules::BackendRule;
use crate::state::StateError;

/// A refused or failed request; `status` is the HTTP status it is answered with.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct ApiError {
    pub status: StatusCode,
    pub message: String,
}

impl ApiError {
    pub fn new(status: StatusCode, message: impl Into<String>) -> ApiError {
        ApiError { status, message: message.into() }
    }
    pub fn bad_request(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, message)
    }
    pub fn not_found(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::NOT_FOUND, message)
    }
    pub fn internal(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, message)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> axum::response::Response {
        (self.status, Json(types::ErrorBody { error: self.message })).into_response()
    }
}

impl From<StateError> for ApiError {
    fn from(e: StateError) -> ApiError {
        let status = match &e {
            StateError::UnknownVip(_) | StateError::UnknownBackend { .. } => StatusCode::NOT_FOUND,
            StateError::Rejected { rule: BackendRule::RingFull { .. }, .. }
            | StateError::DuplicateBackend { .. }
            | StateError::NoFreeId(..) => StatusCode::CONFLICT,
            StateError::AmbiguousVip { .. }
            | StateError::Rejected { .. }
            | StateError::MalformedAddress(..)
            | StateError::NotApplicable(_) => StatusCode::BAD_REQUEST,
        };
        ApiError::new(status, e.to_string())
    }
}

impl From<crate::dataplane::DataplaneError> for ApiError {
    fn from(e: crate::dataplane::DataplaneError) -> ApiError {
        ApiError::internal(format!("data plane: {e}"))
    }
}

#[cfg(test)]
mod monitoring_tests;
#[cfg(test)]
mod proxy_metrics_tests;
#[cfg(test)]
mod tests;
