//! Facts about Region, peer and store metadata that a client and a server
//! must agree on: which keys a Region holds, which peers may lead, and
//! which stores run TiKV (a TiFlash store, listed by PD beside them,
//! serves no TiKV request).

use crate::metapb::{self, PeerRole};

/// True when `key` lies in the Region's `[start_key, end_key)`, an empty end
/// key meaning the end of the key space. The client's cache and the
/// simulated stores share this one definition.
pub fn key_in_region(region: &metapb::Region, key: &[u8]) -> bool {
    key_in_range(&region.start_key, &region.end_key, key)
}

/// True when `key` lies in `[start, end)`, an empty `end` meaning the end of
/// the key space.
pub fn key_in_range(start: &[u8], end: &[u8], key: &[u8]) -> bool {
    key >= start && (end.is_empty() || key < end)
}

/// True when a peer may be asked to act as leader: voters (including the
/// joint-consensus roles) that are not witnesses. A role this crate does
/// not know counts as unable to lead.
pub fn can_become_leader(peer: &metapb::Peer) -> bool {
    PeerRole::try_from(peer.role).is_ok_and(|role| role_can_lead(role, peer.is_witness))
}

/// The rule behind [`can_become_leader`] for a role already decoded (the
/// simulated cluster's layouts hold `PeerRole`s, not wire integers).
pub fn role_can_lead(role: PeerRole, is_witness: bool) -> bool {
    !is_witness
        && matches!(
            role,
            PeerRole::Voter | PeerRole::IncomingVoter | PeerRole::DemotingVoter
        )
}

/// The label key a store's engine is named by. TiKV sets none (or
/// `tikv`); TiFlash's proxy registers its store with `engine=tiflash`
/// (`engine=tiflash_compute` for a compute node), and PD refuses any other
/// value and any change of this label by hand.
pub const ENGINE_LABEL_KEY: &str = "engine";
/// The `engine` label value of a TiFlash store (a write node, or a node of
/// a cluster that does not separate compute from storage).
pub const ENGINE_TIFLASH: &str = "tiflash";
/// The `engine` label value of a TiFlash compute node (it holds no
/// Region).
pub const ENGINE_TIFLASH_COMPUTE: &str = "tiflash_compute";

/// The engine a store runs, as its labels say.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StoreEngine {
    /// TiKV: every TiKV request may go there.
    TiKv,
    /// TiFlash, the columnar engine: it holds learner peers and answers
    /// no TiKV request.
    TiFlash,
    /// A TiFlash compute node: no peers, no TiKV request.
    TiFlashCompute,
}

impl StoreEngine {
    /// The engine a store with these labels runs. The first `engine` label
    /// naming TiFlash decides; any other store is TiKV, whatever else its
    /// labels say (client-go reads them the same way).
    pub fn of_labels(labels: &[metapb::StoreLabel]) -> StoreEngine {
        labels
            .iter()
            .filter(|l| l.key == ENGINE_LABEL_KEY)
            .find_map(|l| match l.value.as_str() {
                ENGINE_TIFLASH => Some(StoreEngine::TiFlash),
                ENGINE_TIFLASH_COMPUTE => Some(StoreEngine::TiFlashCompute),
                _ => None,
            })
            .unwrap_or(StoreEngine::TiKv)
    }

    /// The engine of `store`, by its labels.
    pub fn of_store(store: &metapb::Store) -> StoreEngine {
        StoreEngine::of_labels(&store.labels)
    }

    /// True for TiKV: the only engine a TiKV request is sent to.
    pub fn is_tikv(self) -> bool {
        self == StoreEngine::TiKv
    }

    /// The value of the store's `engine` label (`tikv` for TiKV, which
    /// usually sets none).
    pub fn label_value(self) -> &'static str {
        match self {
            StoreEngine::TiKv => "tikv",
            StoreEngine::TiFlash => ENGINE_TIFLASH,
            StoreEngine::TiFlashCompute => ENGINE_TIFLASH_COMPUTE,
        }
    }
}

/// True when `store` runs TiKV: no `engine` label naming TiFlash. The one
/// rule that keeps TiFlash stores out of every TiKV request, fallback,
/// replica read, forwarding proxy and store-wide operation.
pub fn is_tikv_store(store: &metapb::Store) -> bool {
    StoreEngine::of_store(store).is_tikv()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> Vec<metapb::StoreLabel> {
        pairs
            .iter()
            .map(|(key, value)| metapb::StoreLabel {
                key: (*key).to_owned(),
                value: (*value).to_owned(),
            })
            .collect()
    }

    #[test]
    fn the_engine_label_decides() {
        let table: [(&[(&str, &str)], StoreEngine); 8] = [
            (&[], StoreEngine::TiKv),
            (&[("zone", "z1")], StoreEngine::TiKv),
            (&[("engine", "tikv")], StoreEngine::TiKv),
            (&[("engine", "tiflash")], StoreEngine::TiFlash),
            (
                &[("zone", "z1"), ("engine", "tiflash")],
                StoreEngine::TiFlash,
            ),
            (
                &[("engine", "tiflash_compute")],
                StoreEngine::TiFlashCompute,
            ),
            // Case and key matter: neither is TiFlash's label.
            (&[("engine", "TiFlash")], StoreEngine::TiKv),
            (&[("engine_role", "tiflash")], StoreEngine::TiKv),
        ];
        for (pairs, engine) in table {
            assert_eq!(StoreEngine::of_labels(&labels(pairs)), engine, "{pairs:?}");
        }
    }

    #[test]
    fn only_tikv_stores_take_tikv_requests() {
        let store = |pairs: &[(&str, &str)]| metapb::Store {
            id: 1,
            labels: labels(pairs),
            ..Default::default()
        };
        assert!(is_tikv_store(&store(&[])));
        assert!(!is_tikv_store(&store(&[("engine", "tiflash")])));
        assert!(!is_tikv_store(&store(&[
            ("engine", "tiflash_compute"),
            ("exclusive", "no-data")
        ])));
        // A write node of a disaggregated cluster is TiFlash all the same.
        assert!(!is_tikv_store(&store(&[
            ("engine", "tiflash"),
            ("engine_role", "write")
        ])));
    }
}
