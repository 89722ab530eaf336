//! A TCP relay in front of a harness database. A test's Secret names the
//! relay; stopping it takes "the database" away (every connection refused,
//! every open one cut) and starting it again gives it back at the same
//! address, without stopping the server the other tests share.

use std::net::SocketAddr;

use anyhow::Context;
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// A running (or stopped) relay to one address.
pub struct Relay {
    port: u16,
    target: SocketAddr,
    running: Option<(JoinHandle<()>, CancellationToken)>,
}

impl Relay {
    /// A relay on a loopback port of its own to `target`, running.
    pub async fn start(target: SocketAddr) -> anyhow::Result<Relay> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let port = listener.local_addr()?.port();
        let mut relay = Relay {
            port,
            target,
            running: None,
        };
        relay.serve(listener);
        Ok(relay)
    }

    /// Its port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Stops listening and cuts every connection.
    pub async fn stop(&mut self) {
        if let Some((task, cut)) = self.running.take() {
            cut.cancel();
            task.abort();
            let _ = task.await;
        }
    }

    /// Listens again on the same port.
    pub async fn resume(&mut self) -> anyhow::Result<()> {
        if self.running.is_none() {
            let listener = TcpListener::bind(("127.0.0.1", self.port))
                .await
                .with_context(|| format!("binding the relay's port {} again", self.port))?;
            self.serve(listener);
        }
        Ok(())
    }

    fn serve(&mut self, listener: TcpListener) {
        let cut = CancellationToken::new();
        let (target, token) = (self.target, cut.clone());
        let task = tokio::spawn(async move {
            while let Ok((mut inbound, _)) = listener.accept().await {
                let token = token.clone();
                tokio::spawn(async move {
                    let Ok(mut outbound) = TcpStream::connect(target).await else {
                        return;
                    };
                    tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound) => {}
                        _ = token.cancelled() => {}
                    }
                });
            }
        });
        self.running = Some((task, cut));
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        if let Some((task, cut)) = self.running.take() {
            cut.cancel();
            task.abort();
        }
    }
}
