//! The control socket: one JSON request per line in, one JSON response
//! per line out (see `tierfs_core::report`). Served by a small tokio
//! runtime on its own thread, so it never competes with file system
//! requests for their threads.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use tierfs_core::report::{Request, Response};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::UnixListener;

/// Answers requests; implemented by the mount for its engine.
pub trait Handler: Send + Sync + 'static {
    /// One request, one response.
    fn handle(&self, req: Request) -> Response;
}

/// A running control server; stops and removes its socket on drop.
pub struct ControlServer {
    path: PathBuf,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl ControlServer {
    /// Listens on `path` (replacing a stale socket), owner-only.
    pub fn start(path: &Path, handler: Arc<dyn Handler>) -> std::io::Result<Self> {
        if let Some(d) = path.parent() {
            std::fs::create_dir_all(d)?;
        }
        let _ = std::fs::remove_file(path);
        let rt = tokio::runtime::Builder::new_current_thread().enable_io().build()?;
        let listener = {
            let _g = rt.enter();
            UnixListener::bind(path)?
        };
        std::fs::set_permissions(path, std::os::unix::fs::PermissionsExt::from_mode(0o600))?;
        let (tx, mut rx) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::Builder::new().name("tierfs-control".into()).spawn(move || {
            rt.block_on(async move {
                loop {
                    tokio::select! {
                        _ = &mut rx => break,
                        acc = listener.accept() => {
                            let Ok((stream, _)) = acc else { continue };
                            let h = handler.clone();
                            tokio::spawn(serve_conn(stream, h));
                        }
                    }
                }
            });
        })?;
        Ok(ControlServer { path: path.to_path_buf(), stop: Some(tx), thread: Some(thread) })
    }
}

async fn serve_conn(stream: tokio::net::UnixStream, h: Arc<dyn Handler>) {
    let (r, mut w) = stream.into_split();
    let mut lines = BufReader::new(r).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        let resp = match serde_json::from_str::<Request>(&line) {
            Ok(req) => h.handle(req),
            Err(e) => Response::Error(format!("bad request: {e}")),
        };
        let mut out = serde_json::to_string(&resp).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"));
        out.push('\n');
        if w.write_all(out.as_bytes()).await.is_err() {
            break;
        }
    }
}

impl Drop for ControlServer {
    fn drop(&mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        let _ = std::fs::remove_file(&self.path);
    }
}
