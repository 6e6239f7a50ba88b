//! The control API: HTTP/1.1 + JSON over a Unix socket (owner root, mode 0600), paths under
//! `/v1/`. The server turns requests into messages to the daemon's writer; the client is what
//! the CLI uses.
//!
//! | method, path               | body               | answer            |
//! |----------------------------|--------------------|-------------------|
//! | GET  /v1/status            |                    | `StatusView`      |
//! | GET  /v1/vips              |                    | `[VipView]`       |
//! | GET  /v1/backends[?vip=V]  |                    | `[BackendView]`   |
//! | POST /v1/backends          | `BackendRequest`   | `Changed` (add)   |
//! | POST /v1/backends/remove   | `BackendRequest`   | `Changed`         |
//! | POST /v1/backends/drain    | `BackendRequest`   | `Changed`         |
//! | GET  /v1/stats             |                    | `StatsView`       |
//! | POST /v1/explain           | `ExplainRequest`   | `ExplainView`     |
//! | POST /v1/reload            |                    | `ReloadView`      |
//!
//! Errors answer `{"error": "..."}` with 400 (malformed request, invalid value, config with
//! mistakes), 404 (unknown VIP or backend, unknown path), 405, 409 (duplicate backend, no free
//! id) or 500 (data plane failure).
pub mod client;
pub mod server;
pub mod types;

use crate::state::StateError;

/// The class of a refused request, which sets its HTTP status.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorKind {
    BadRequest,
    NotFound,
    MethodNotAllowed,
    Conflict,
    Internal,
}

impl ErrorKind {
    pub fn status(self) -> u16 {
        match self {
            ErrorKind::BadRequest => 400,
            ErrorKind::NotFound => 404,
            ErrorKind::MethodNotAllowed => 405,
            ErrorKind::Conflict => 409,
            ErrorKind::Internal => 500,
        }
    }
}

/// A refused or failed request.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct ApiError {
    pub kind: ErrorKind,
    pub message: String,
}

impl ApiError {
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> ApiError {
        ApiError { kind, message: message.into() }
    }
    pub fn bad_request(message: impl Into<String>) -> ApiError {
        ApiError::new(ErrorKind::BadRequest, message)
    }
    pub fn internal(message: impl Into<String>) -> ApiError {
        ApiError::new(ErrorKind::Internal, message)
    }
}

impl From<StateError> for ApiError {
    fn from(e: StateError) -> ApiError {
        let kind = match &e {
            StateError::UnknownVip(_) | StateError::UnknownBackend { .. } => ErrorKind::NotFound,
            StateError::DuplicateBackend { .. } | StateError::NoFreeId(..) | StateError::RingFull { .. } => {
                ErrorKind::Conflict
            }
            StateError::AmbiguousVip { .. }
            | StateError::WeightOutOfRange(_)
            | StateError::MalformedAddress(..)
            | StateError::UnsupportedFamily { .. }
            | StateError::NotApplicable(_) => ErrorKind::BadRequest,
        };
        ApiError::new(kind, e.to_string())
    }
}

impl From<crate::dataplane::DataplaneError> for ApiError {
    fn from(e: crate::dataplane::DataplaneError) -> ApiError {
        ApiError::internal(format!("data plane: {e}"))
    }
}

#[cfg(test)]
mod tests;
