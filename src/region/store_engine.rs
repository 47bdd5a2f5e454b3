//! Which stores take TiKV requests ([routing.md, "TiFlash stores and
//! peers"](crate::spec::routing#tiflash-stores-and-peers)): those whose
//! labels name no other engine. PD lists TiFlash stores (label
//! `engine=tiflash`, or `engine=tiflash_compute`) beside TiKV's, and
//! Regions carry TiFlash learners; neither is ever the target of a TiKV
//! request. The rule itself is the wire crate's
//! ([`StoreEngine`], shared with the simulator); here is what the client
//! does with it: a mapping refuses such a store before dialling it, with
//! an error the candidate round recognises.

use crate::classify::{classify_dispatch_error, DispatchFailure};
use crate::error::Failure;
use crate::proto::metapb;
use crate::{Error, Result};

use super::StoreId;

pub(crate) use tikv_plan_proto::meta::StoreEngine;

/// `Ok` for a store whose labels say it runs TiKV; for any other, the
/// error a mapping returns instead of dialling it
/// ([`Failure::NotTiKvStore`]).
pub(crate) fn refuse_unless_tikv(store_id: StoreId, labels: &[metapb::StoreLabel]) -> Result<()> {
    match StoreEngine::of_labels(labels) {
        StoreEngine::TiKv => Ok(()),
        engine => Err(Error::from(Failure::NotTiKvStore {
            store_id,
            engine: engine.label_value().to_owned(),
        })),
    }
}

/// True when `error` is [`refuse_unless_tikv`]'s refusal: nothing was
/// sent, and the store is not to blame (its cache entry is right).
pub(crate) fn is_not_tikv_refusal(error: &Error) -> bool {
    matches!(error.failure(), Some(Failure::NotTiKvStore { .. }))
}

/// True when a failed mapping says the store itself could not be reached
/// (not, say, PD being unavailable, or a TiFlash store refused): the store
/// then cools down.
pub(crate) fn store_unreached(error: &Error) -> bool {
    classify_dispatch_error(error) == DispatchFailure::NotSent && !is_not_tikv_refusal(error)
}

/// True when the store's labels, if known, name another engine than TiKV
/// (`None`: not known yet, so not excluded; mapping it will tell).
pub(crate) fn known_not_tikv(labels: Option<&[metapb::StoreLabel]>) -> bool {
    labels.is_some_and(|l| !StoreEngine::of_labels(l).is_tikv())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn engine(value: &str) -> Vec<metapb::StoreLabel> {
        vec![
            metapb::StoreLabel {
                key: "zone".to_owned(),
                value: "z1".to_owned(),
            },
            metapb::StoreLabel {
                key: "engine".to_owned(),
                value: value.to_owned(),
            },
        ]
    }

    #[test]
    fn tiflash_stores_are_refused_and_tikv_stores_are_not() {
        assert!(refuse_unless_tikv(1, &[]).is_ok());
        assert!(refuse_unless_tikv(1, &engine("tikv")).is_ok());
        for value in ["tiflash", "tiflash_compute"] {
            let refusal = refuse_unless_tikv(7, &engine(value)).unwrap_err();
            assert!(is_not_tikv_refusal(&refusal), "{refusal}");
            match refusal.failure() {
                Some(Failure::NotTiKvStore { store_id, engine }) => {
                    assert_eq!((*store_id, engine.as_str()), (7, value));
                }
                other => panic!("{other:?}"),
            }
            // Nothing left the client: a round never counts it as sent.
            assert_eq!(classify_dispatch_error(&refusal), DispatchFailure::NotSent);
            assert!(refusal.to_string().contains("store 7"), "{refusal}");
        }
    }

    #[test]
    fn only_known_tiflash_labels_exclude_a_store() {
        assert!(!known_not_tikv(None));
        assert!(!known_not_tikv(Some(&[])));
        assert!(known_not_tikv(Some(&engine("tiflash"))));
        assert!(known_not_tikv(Some(&engine("tiflash_compute"))));
        let other = Error::from(Failure::StoreNotFound { store_id: 7 });
        assert!(!is_not_tikv_refusal(&other));
        // A store PD no longer knows cools down; a TiFlash store does not.
        assert!(store_unreached(&other));
        assert!(!store_unreached(
            &refuse_unless_tikv(7, &engine("tiflash")).unwrap_err()
        ));
    }
}
