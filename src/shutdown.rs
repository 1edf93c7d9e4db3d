//! One stop signal for every background loop: loops check it between units of
//! work (so in-flight work finishes) and their sleeps end as soon as it fires.

use std::time::Duration;

use tokio::sync::watch;

#[derive(Debug)]
pub struct ShutdownTrigger(watch::Sender<bool>);

#[derive(Debug, Clone)]
pub struct Shutdown(watch::Receiver<bool>);

pub fn channel() -> (ShutdownTrigger, Shutdown) {
    let (tx, rx) = watch::channel(false);
    (ShutdownTrigger(tx), Shutdown(rx))
}

impl ShutdownTrigger {
    pub fn trigger(&self) {
        let _ = self.0.send(true);
    }
}

impl Shutdown {
    pub fn is_requested(&self) -> bool {
        *self.0.borrow()
    }

    /// Resolves once shutdown is requested (or its trigger is gone).
    pub async fn requested(&mut self) {
        let _ = self.0.wait_for(|stop| *stop).await;
    }

    /// Sleeps for `duration`; returns `false` if shutdown cut the sleep short.
    pub async fn sleep(&mut self, duration: Duration) -> bool {
        tokio::select! {
            () = tokio::time::sleep(duration) => !self.is_requested(),
            () = self.requested() => false,
        }
    }
}
