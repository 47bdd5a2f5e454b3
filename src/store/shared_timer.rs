//! One timer for an RPC's two waits: the batched stream's bound on the
//! answer and store liveness' watch (the retry shell's
//! `liveness_probe::watched`, which wants to hear when an RPC has gone
//! unanswered for a while). Each would keep a timer of its own, and a
//! timer costs a registration and a removal in the runtime's wheel per
//! RPC. Instead the watch *offers* its instant to whatever waits inside
//! the RPC it polls; the batched stream's wait takes the offer, times its
//! one timer to the earlier of the two instants, and when the watch's
//! comes first tells the watch so and re-times the timer to its own bound.
//!
//! The offer and the replies travel through a thread-local slot, valid
//! only during one synchronous poll: the watch writes the slot, polls the
//! RPC (the stream's wait runs inside that poll, on the same thread) and
//! reads the slot back before it returns. Nothing awaits between the write
//! and the read, so no other task can see the slot, on any runtime. A wait
//! that took the offer and ends before the watch's instant (its stream
//! closed, say, and the request goes on as a unary call) hands it back,
//! and the watch keeps its own timer from then on.

use std::cell::Cell;
use std::future::{poll_fn, Future};
use std::pin::pin;
use std::task::Poll;

use tokio::time::Instant;

/// The slot's state, as the watch and the wait write it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Slot {
    /// Nothing offered (the watch clears the slot after each poll).
    Empty,
    /// The watch wants to hear of this instant.
    Offered(Instant),
    /// A wait took the offer: its timer will say when the instant passes.
    Taken,
    /// The taken instant passed, while the RPC was not answered.
    Passed,
    /// The wait that took the offer ended before the instant: the watch
    /// times it itself.
    HandedBack,
}

thread_local! {
    static SLOT: Cell<Slot> = const { Cell::new(Slot::Empty) };
}

/// The watch: offers `at` to the wait inside the RPC it is about to poll.
pub(crate) fn offer(at: Instant) {
    SLOT.with(|slot| slot.set(Slot::Offered(at)));
}

/// The watch, after a poll of its RPC: what the wait inside said during
/// that poll, the slot cleared. An offer still there was not taken.
pub(crate) fn collect() -> Slot {
    SLOT.with(|slot| slot.replace(Slot::Empty))
}

/// The wait: the instant offered, if any, now taken.
fn take() -> Option<Instant> {
    SLOT.with(|slot| match slot.get() {
        Slot::Offered(at) => {
            slot.set(Slot::Taken);
            Some(at)
        }
        _ => None,
    })
}

/// Awaits `future` until `deadline` (`None`: the deadline passed first),
/// as `tokio::time::timeout_at` does, with the one timer it keeps shared
/// with a watch that offered an instant before `deadline`.
pub(crate) async fn until<F: Future>(deadline: Instant, future: F) -> Option<F::Output> {
    let mut watch = take();
    // An instant at or after the bound never passes inside the wait: the
    // wait ends first, and with it the RPC, unless it ends with an answer
    // that sends the request on (a unary call): then the instant is
    // handed back below and the watch times it itself.
    let first = match watch {
        Some(at) if at < deadline => at,
        _ => deadline,
    };
    let mut future = pin!(future);
    let mut timer = pin!(tokio::time::sleep_until(first));
    let output = poll_fn(|cx| {
        if let Poll::Ready(output) = future.as_mut().poll(cx) {
            return Poll::Ready(Some(output));
        }
        loop {
            if timer.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
            match watch.take() {
                Some(at) if at < deadline => {
                    SLOT.with(|slot| slot.set(Slot::Passed));
                    timer.as_mut().reset(deadline);
                }
                _ => return Poll::Ready(None),
            }
        }
    })
    .await;
    if watch.is_some() {
        SLOT.with(|slot| slot.set(Slot::HandedBack));
    }
    output
}

#[cfg(test)]
mod tests {
    use std::pin::Pin;
    use std::task::Context;
    use std::time::Duration;

    use tokio::sync::oneshot;

    use super::*;

    /// One poll of `wait` as a watch makes it: `offer` (if any) before,
    /// the slot collected after.
    fn poll<F: Future>(wait: Pin<&mut F>, offer_at: Option<Instant>) -> (Poll<F::Output>, Slot) {
        if let Some(at) = offer_at {
            offer(at);
        }
        let mut cx = Context::from_waker(futures::task::noop_waker_ref());
        let polled = wait.poll(&mut cx);
        (polled, collect())
    }

    #[tokio::test(start_paused = true)]
    async fn an_offer_before_the_bound_is_taken_told_when_it_passes_and_the_bound_still_holds() {
        let start = Instant::now();
        let (_tx, rx) = oneshot::channel::<u8>();
        let mut wait = pin!(until(start + Duration::from_secs(10), rx));
        let at = start + Duration::from_secs(1);
        assert!(matches!(
            poll(wait.as_mut(), Some(at)),
            (Poll::Pending, Slot::Taken)
        ));
        tokio::time::advance(Duration::from_millis(999)).await;
        assert!(matches!(
            poll(wait.as_mut(), None),
            (Poll::Pending, Slot::Empty)
        ));
        tokio::time::advance(Duration::from_millis(1)).await;
        assert!(matches!(
            poll(wait.as_mut(), None),
            (Poll::Pending, Slot::Passed)
        ));
        tokio::time::advance(Duration::from_millis(8_999)).await;
        assert!(matches!(
            poll(wait.as_mut(), None),
            (Poll::Pending, Slot::Empty)
        ));
        tokio::time::advance(Duration::from_millis(1)).await;
        assert!(matches!(
            poll(wait.as_mut(), None),
            (Poll::Ready(None), Slot::Empty)
        ));
    }

    #[tokio::test(start_paused = true)]
    async fn a_wait_answered_before_the_offered_instant_hands_it_back() {
        let start = Instant::now();
        let (tx, rx) = oneshot::channel::<u8>();
        let mut wait = pin!(until(start + Duration::from_secs(10), rx));
        let at = start + Duration::from_secs(1);
        assert!(matches!(
            poll(wait.as_mut(), Some(at)),
            (Poll::Pending, Slot::Taken)
        ));
        tx.send(7).unwrap();
        let (polled, slot) = poll(wait.as_mut(), None);
        assert!(matches!(polled, Poll::Ready(Some(Ok(7)))), "{polled:?}");
        assert_eq!(slot, Slot::HandedBack);
    }

    #[tokio::test(start_paused = true)]
    async fn without_an_offer_it_is_a_plain_timeout_and_leaves_the_slot_alone() {
        let start = Instant::now();
        let (_tx, rx) = oneshot::channel::<u8>();
        let mut wait = pin!(until(start + Duration::from_secs(10), rx));
        assert!(matches!(
            poll(wait.as_mut(), None),
            (Poll::Pending, Slot::Empty)
        ));
        tokio::time::advance(Duration::from_millis(9_999)).await;
        assert!(matches!(
            poll(wait.as_mut(), None),
            (Poll::Pending, Slot::Empty)
        ));
        tokio::time::advance(Duration::from_millis(1)).await;
        assert!(matches!(
            poll(wait.as_mut(), None),
            (Poll::Ready(None), Slot::Empty)
        ));
    }

    #[tokio::test(start_paused = true)]
    async fn an_offer_at_or_after_the_bound_never_passes_the_wait_ends_first() {
        let start = Instant::now();
        let (_tx, rx) = oneshot::channel::<u8>();
        let deadline = start + Duration::from_secs(10);
        let mut wait = pin!(until(deadline, rx));
        assert!(matches!(
            poll(wait.as_mut(), Some(deadline)),
            (Poll::Pending, Slot::Taken)
        ));
        tokio::time::advance(Duration::from_secs(10)).await;
        assert!(matches!(
            poll(wait.as_mut(), None),
            (Poll::Ready(None), Slot::Empty)
        ));
    }

    #[test]
    fn a_wait_takes_only_an_offer() {
        for slot in [Slot::Empty, Slot::Taken, Slot::Passed, Slot::HandedBack] {
            SLOT.with(|s| s.set(slot));
            assert_eq!(take(), None);
            assert_eq!(collect(), slot);
        }
    }
}
