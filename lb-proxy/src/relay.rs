//! Byte relay between two TCP connections with correct half-close: when one side finishes
//! sending, the other side's write half is shut down and the reverse direction keeps going
//! until it finishes too. Ends early when no byte moved either way for `idle`.
use std::io;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::net::tcp::{ReadHalf, WriteHalf};

use crate::outlier::now_ms;

const BUF: usize = 64 * 1024;

pub(crate) async fn relay(mut a: TcpStream, mut b: TcpStream, idle: Duration) -> io::Result<()> {
    let last = AtomicU64::new(now_ms());
    let (ar, aw) = a.split();
    let (br, bw) = b.split();
    let both = async { tokio::try_join!(pump(ar, bw, &last), pump(br, aw, &last)) };
    tokio::select! {
        r = both => r.map(|_| ()),
        _ = idle_watch(&last, idle) => Ok(()),
    }
}

/// Copies one direction until EOF, then shuts down the writer (sends FIN).
async fn pump(mut from: ReadHalf<'_>, mut to: WriteHalf<'_>, last: &AtomicU64) -> io::Result<()> {
    let mut buf = vec![0u8; BUF];
    loop {
        let n = from.read(&mut buf).await?;
        if n == 0 {
            break;
        }
        to.write_all(&buf[..n]).await?;
        last.store(now_ms(), Relaxed);
    }
    to.shutdown().await
}

/// Resolves once `last` is older than `idle`.
async fn idle_watch(last: &AtomicU64, idle: Duration) {
    let idle_ms = idle.as_millis() as u64;
    loop {
        let quiet = now_ms().saturating_sub(last.load(Relaxed));
        if quiet >= idle_ms {
            return;
        }
        tokio::time::sleep(Duration::from_millis(idle_ms - quiet)).await;
    }
}
