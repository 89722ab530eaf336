//! Waiting on a condition with a timeout, never a bare sleep: every test
//! waits for the control plane this way, so a failure names what did not
//! happen and how long it was given.

use std::future::Future;
use std::time::{Duration, Instant};

use anyhow::bail;

/// Waits for a future (a condition watch such as `await_condition`) for at
/// most `timeout`; an error of the future or the timeout names `what`.
pub async fn wait<T, E: std::fmt::Display>(
    what: &str,
    timeout: Duration,
    fut: impl Future<Output = Result<T, E>>,
) -> anyhow::Result<T> {
    match tokio::time::timeout(timeout, fut).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => bail!("waiting for {what}: {e}"),
        Err(_) => bail!("{what} did not happen within {timeout:?}"),
    }
}

/// Polls `probe` every `interval` until it yields a value, for at most
/// `timeout`: for things no single watch sees. An error of the probe ends the
/// wait at once.
pub async fn poll_every<T, F, Fut>(
    what: &str,
    timeout: Duration,
    interval: Duration,
    mut probe: F,
) -> anyhow::Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = anyhow::Result<Option<T>>>,
{
    let start = Instant::now();
    loop {
        if let Some(v) = probe().await? {
            return Ok(v);
        }
        if start.elapsed() > timeout {
            bail!("{what} did not happen within {timeout:?}");
        }
        tokio::time::sleep(interval).await;
    }
}

/// How long a test file waits and how often it looks again: one value per
/// file, so its waits agree without each file writing its own helpers.
#[derive(Debug, Clone, Copy)]
pub struct Patience {
    /// The longest any one wait may take.
    pub timeout: Duration,
    /// The pause between two probes of [`Patience::poll`].
    pub interval: Duration,
}

impl Patience {
    /// At most `timeout` a wait, looking every `interval`.
    pub const fn new(timeout: Duration, interval: Duration) -> Self {
        Patience { timeout, interval }
    }

    /// [`wait`] with this timeout.
    pub async fn wait<T, E: std::fmt::Display>(
        &self,
        what: &str,
        fut: impl Future<Output = Result<T, E>>,
    ) -> anyhow::Result<T> {
        wait(what, self.timeout, fut).await
    }

    /// [`poll_every`] with this timeout and interval.
    pub async fn poll<T, F, Fut>(&self, what: &str, probe: F) -> anyhow::Result<T>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = anyhow::Result<Option<T>>>,
    {
        poll_every(what, self.timeout, self.interval, probe).await
    }
}
