//! The HTTP side: HTTP/1.1 and h2 (h2c prior knowledge, or ALPN over TLS) from clients,
//! HTTP/1.1 (optionally over TLS) to backends.
mod access_log;
mod body;
pub(crate) mod budget;
mod conn;
mod decode;
mod fields;
mod forward;
mod h1;
mod h2;
mod h2_ping;
mod h2_recv;
mod h2_send;
mod h2_socket;
mod h2_stream;
mod headers;
mod idle;
mod request_id;
mod respond;
mod server;
mod upgrade;
mod upload;
pub(crate) mod upstream;
mod validate;

pub use access_log::log_access_as_fields;
pub(crate) use respond::{BUSY_RESPONSE, TOO_MANY_RESPONSE};
pub(crate) use server::{refuse_connection, serve_connection, serve_plain};
