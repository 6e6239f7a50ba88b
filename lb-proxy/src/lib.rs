//! lb-proxy
