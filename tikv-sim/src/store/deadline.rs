//! What TiKV does with a read's `Context.max_execution_duration_ms`: the
//! read's deadline starts when the request arrives
//! (`Storage::get_deadline` in TiKV's `storage/mod.rs`), and the read pool
//! checks it before reading (`deadline.check()` in `Storage::get_entry`,
//! `batch_get`, `batch_get_command`). A read whose deadline passed while
//! it queued is dropped unread and answered with the Region error
//! `ServerIsBusy` whose reason is "deadline is exceeded"
//! (`storage::errors::extract_region_error_from_error`, which calls
//! `tikv_util::deadline::set_deadline_exceeded_busy_error`).
//!
//! Only TiKV's transactional point reads check it so (`KvGet`,
//! `KvBatchGet`); a raw read's deadline only bounds TiKV's wait for a
//! snapshot, and a write's is checked before anything is proposed.

use std::time::Duration;

use tokio::time::Instant;

use crate::proto::{errorpb, kvrpcpb};

/// The reason TiKV gives (`tikv_util::deadline`).
pub(crate) const DEADLINE_EXCEEDED_REASON: &str = "deadline is exceeded";

/// The message of TiKV's storage error (`storage::errors`).
const DEADLINE_EXCEEDED_MESSAGE: &str = "Deadline is exceeded";

/// The Region error TiKV answers a read whose deadline passed, when the
/// read arrived at `received` with `context`; `None` while it has time
/// left (or carries no deadline: 0 is TiKV's "no limit").
pub(crate) fn expired(
    context: Option<&kvrpcpb::Context>,
    received: Instant,
) -> Option<errorpb::Error> {
    let ms = context.map_or(0, |c| c.max_execution_duration_ms);
    if ms == 0 || received.elapsed() < Duration::from_millis(ms) {
        return None;
    }
    Some(errorpb::Error {
        message: DEADLINE_EXCEEDED_MESSAGE.to_owned(),
        server_is_busy: Some(errorpb::ServerIsBusy {
            reason: DEADLINE_EXCEEDED_REASON.to_owned(),
            ..Default::default()
        }),
        ..Default::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_deadline(ms: u64) -> kvrpcpb::Context {
        kvrpcpb::Context {
            max_execution_duration_ms: ms,
            ..Default::default()
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_read_is_dropped_once_its_deadline_has_passed() {
        let received = Instant::now();
        let context = with_deadline(100);
        tokio::time::sleep(Duration::from_millis(99)).await;
        assert_eq!(expired(Some(&context), received), None);
        tokio::time::sleep(Duration::from_millis(1)).await;
        let error = expired(Some(&context), received).expect("dropped");
        assert_eq!(
            error.server_is_busy.map(|b| b.reason),
            Some(DEADLINE_EXCEEDED_REASON.to_owned())
        );
    }

    #[tokio::test(start_paused = true)]
    async fn no_deadline_means_no_limit() {
        let received = Instant::now();
        tokio::time::sleep(Duration::from_secs(3600)).await;
        assert_eq!(expired(Some(&with_deadline(0)), received), None);
        assert_eq!(expired(None, received), None);
    }
}
