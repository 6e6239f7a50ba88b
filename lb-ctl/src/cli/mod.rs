//! What the CLI prints: API answers as tables and text. `main.rs` parses the command line and
//! calls the API; the rendering lives here so it can be tested.
pub mod render;
