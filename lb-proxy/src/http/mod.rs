//! The HTTP side: HTTP/1.1 and h2c (prior knowledge) from clients, HTTP/1.1 to backends.
mod body;
mod forward;
mod headers;
mod respond;
mod server;
mod sniff;
mod upgrade;

pub(crate) use server::{refuse_busy, serve_connection};
