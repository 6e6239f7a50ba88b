//! A tiny HTTP/1.1 backend for the lab and the tests (std only; one thread per connection).
//!
//! `lb-test-backend LISTEN_ADDR NAME`
//! - `GET /` → `NAME\n` (which backend answered)
//! - `GET /health` → 200 `ok`
//! - `GET /bytes/N` → N bytes of the pattern `pattern_byte(i)` (large, byte-exact responses)
//! - `GET /hold/SECONDS` → headers now, then one byte a second (a long-lived connection)
//! - any request with a body → `received N sum S` (its length and byte sum: uploads)
//!
//! Keep-alive is honoured; `Connection: close` closes after the response.
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::Duration;

use lb_tests::lab::pattern_byte;

fn main() {
    let mut args = std::env::args().skip(1);
    let (Some(listen), Some(name)) = (args.next(), args.next()) else {
        eprintln!("usage: lb-test-backend LISTEN_ADDR NAME");
        std::process::exit(2);
    };
    let listener = TcpListener::bind(&listen).unwrap_or_else(|e| {
        eprintln!("lb-test-backend: bind {listen}: {e}");
        std::process::exit(1);
    });
    println!("listening on {listen}");
    for stream in listener.incoming().flatten() {
        let name = name.clone();
        std::thread::spawn(move || {
            let _ = serve(stream, &name);
        });
    }
}

fn serve(stream: TcpStream, name: &str) -> std::io::Result<()> {
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut out = stream;
    loop {
        let mut request = String::new();
        if reader.read_line(&mut request)? == 0 {
            return Ok(());
        }
        let mut close = false;
        let mut body_len = 0usize;
        loop {
            let mut line = String::new();
            if reader.read_line(&mut line)? == 0 {
                return Ok(());
            }
            let lower = line.to_ascii_lowercase();
            if lower.starts_with("connection: close") {
                close = true;
            }
            if let Some(n) = lower.strip_prefix("content-length:") {
                body_len = n.trim().parse().unwrap_or(0);
            }
            if line == "\r\n" || line == "\n" {
                break;
            }
        }
        // A request body (POST /echo-size): read it whole, answer with its length and a checksum.
        let mut body = vec![0u8; body_len];
        reader.read_exact(&mut body)?;
        let path = request.split_whitespace().nth(1).unwrap_or("/").to_string();
        let conn = if close { "close" } else { "keep-alive" };
        if let Some(n) = path.strip_prefix("/bytes/").and_then(|n| n.parse::<usize>().ok()) {
            write!(out, "HTTP/1.1 200 OK\r\nContent-Length: {n}\r\nConnection: {conn}\r\n\r\n")?;
            let body: Vec<u8> = (0..n).map(pattern_byte).collect();
            out.write_all(&body)?;
        } else if let Some(secs) = path.strip_prefix("/hold/").and_then(|n| n.parse::<u64>().ok()) {
            write!(out, "HTTP/1.1 200 OK\r\nContent-Length: {secs}\r\nConnection: close\r\n\r\n")?;
            for _ in 0..secs {
                out.write_all(b".")?;
                out.flush()?;
                std::thread::sleep(Duration::from_secs(1));
            }
            return Ok(());
        } else if body_len > 0 {
            let sum: u64 = body.iter().map(|b| *b as u64).sum();
            let answer = format!("received {body_len} sum {sum}\n");
            write!(out, "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: {conn}\r\n\r\n{answer}", answer.len())?;
        } else {
            let body = if path == "/health" { "ok\n".to_string() } else { format!("{name}\n") };
            write!(out, "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: {conn}\r\n\r\n{body}", body.len())?;
        }
        out.flush()?;
        if close {
            return Ok(());
        }
    }
}
