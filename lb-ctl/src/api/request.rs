//! What the control API asks of the daemon, and what the daemon answers: the vocabulary shared
//! by the HTTP server and whatever serves the requests ([`Service`], the daemon's writer).
use std::future::Future;

use super::ApiError;
use super::trace::{TraceRequest, TraceSession};
use super::types::{
    BackendRequest, BackendView, Changed, EventView, ExplainRequest, ExplainView, NodeView, ReloadView, StatsView,
    StatusView, VipView,
};

/// A request to the daemon.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Request {
    Status,
    Vips,
    /// Backends of one VIP, or of all.
    Backends {
        vip: Option<String>,
    },
    Add(BackendRequest),
    Remove(BackendRequest),
    Drain(BackendRequest),
    Undrain(BackendRequest),
    Stats,
    Explain(ExplainRequest),
    Reload,
    /// `node drain` (true) or `node undrain` (false).
    Node {
        drain: bool,
    },
    /// Every metric, in the OpenMetrics text format.
    Metrics,
    /// The recent events, newest first.
    Events,
}

/// The daemon's answer to a [`Request`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Response {
    Status(Box<StatusView>),
    Vips(Vec<VipView>),
    Backends(Vec<BackendView>),
    Changed(Changed),
    Stats(StatsView),
    Explain(ExplainView),
    Reloaded(ReloadView),
    Node(NodeView),
    /// OpenMetrics text.
    Metrics(String),
    Events(Vec<EventView>),
}

impl Response {
    /// The JSON body of the answer.
    pub fn to_json(&self) -> serde_json::Value {
        let value = match self {
            Response::Status(v) => serde_json::to_value(v),
            Response::Vips(v) => serde_json::to_value(v),
            Response::Backends(v) => serde_json::to_value(v),
            Response::Changed(v) => serde_json::to_value(v),
            Response::Stats(v) => serde_json::to_value(v),
            Response::Explain(v) => serde_json::to_value(v),
            Response::Reloaded(v) => serde_json::to_value(v),
            Response::Node(v) => serde_json::to_value(v),
            Response::Metrics(text) => Ok(serde_json::Value::String(text.clone())),
            Response::Events(v) => serde_json::to_value(v),
        };
        value.expect("API views serialize to JSON")
    }
}

/// Whatever answers API requests (the daemon's handle). The server knows only this.
pub trait Service: Clone + Send + Sync + 'static {
    fn call(&self, request: Request) -> impl Future<Output = Result<Response, ApiError>> + Send;
    /// Starts a trace (`POST /v1/trace`); only the daemon of an XDP data plane has one.
    fn trace(&self, request: TraceRequest) -> impl Future<Output = Result<TraceSession, ApiError>> + Send {
        let _ = request;
        async { Err(ApiError::not_found("this daemon has no XDP data plane to trace")) }
    }
}
