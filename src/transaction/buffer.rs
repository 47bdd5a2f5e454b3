//! A transaction's local view: what it wrote (to be prewritten at commit),
//! what it read (cached), and which keys it locked.

use std::collections::BTreeMap;

use crate::proto::kvrpcpb;
use crate::{Error, Key, KvPair, Result, Value};

/// What the transaction knows about one key.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Entry {
    /// Read from TiKV at the start ts: the value, or absent.
    Cached(Option<Value>),
    /// Written with `put`.
    Put(Value),
    /// Written with `insert`: the key must not exist at commit.
    Insert(Value),
    /// Deleted.
    Del,
    /// Deleted after an insert in this transaction: nothing is written,
    /// but the key must still not exist.
    CheckNotExist,
    /// Locked with `lock_keys` (optimistic: prewritten as a lock; the
    /// cached value, if it was read).
    Locked(Option<Option<Value>>),
}

/// The buffer of one transaction, keyed in key order.
#[derive(Debug, Default, Clone)]
pub struct Buffer {
    entries: BTreeMap<Key, Entry>,
    primary: Option<Key>,
}

/// What the buffer says about a read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BufferedRead {
    /// The buffer decides: the value or absence.
    Known(Option<Value>),
    /// Ask TiKV.
    Unknown,
}

impl Buffer {
    /// The primary key fixed so far: in a pessimistic transaction, the
    /// first key whose pessimistic lock succeeded. Optimistic transactions
    /// choose theirs at commit ([`choose_primary`]).
    pub fn primary_key(&self) -> Option<&Key> {
        self.primary.as_ref()
    }

    /// Makes `key` the primary unless one is set. Called only once `key`
    /// holds a lock ([txn.md](crate::spec::txn#behaviour-we-require): the
    /// primary is a key that takes a lock).
    pub fn set_primary_if_unset(&mut self, key: &Key) {
        if self.primary.is_none() {
            self.primary = Some(key.clone());
        }
    }

    /// What the buffer knows about `key`.
    pub fn get(&self, key: &Key) -> BufferedRead {
        match self.entries.get(key) {
            Some(Entry::Cached(v)) => BufferedRead::Known(v.clone()),
            Some(Entry::Put(v)) | Some(Entry::Insert(v)) => BufferedRead::Known(Some(v.clone())),
            Some(Entry::Del) | Some(Entry::CheckNotExist) => BufferedRead::Known(None),
            Some(Entry::Locked(Some(v))) => BufferedRead::Known(v.clone()),
            Some(Entry::Locked(None)) | None => BufferedRead::Unknown,
        }
    }

    /// What this transaction wrote to `key` (reads and locks are not
    /// writes): `Known` for a put, insert or delete.
    pub fn written(&self, key: &Key) -> BufferedRead {
        match self.entries.get(key) {
            Some(Entry::Put(v)) | Some(Entry::Insert(v)) => BufferedRead::Known(Some(v.clone())),
            Some(Entry::Del) | Some(Entry::CheckNotExist) => BufferedRead::Known(None),
            _ => BufferedRead::Unknown,
        }
    }

    /// Marks `key` locked with its latest value (a pessimistic locking
    /// read), replacing an older cached read; a write stays.
    pub fn lock_with_value(&mut self, key: Key, value: Option<Value>) {
        match self.entries.get(&key) {
            None | Some(Entry::Cached(_)) | Some(Entry::Locked(_)) => {
                self.entries.insert(key, Entry::Locked(Some(value)));
            }
            Some(_) => {}
        }
    }

    /// Remembers a value read from TiKV (never over a write).
    pub fn cache(&mut self, key: Key, value: Option<Value>) {
        match self.entries.get_mut(&key) {
            None => {
                self.entries.insert(key, Entry::Cached(value));
            }
            Some(Entry::Locked(cached @ None)) => *cached = Some(value),
            Some(_) => {}
        }
    }

    /// Buffers a put.
    pub fn put(&mut self, key: Key, value: Value) {
        self.entries.insert(key, Entry::Put(value));
    }

    /// Buffers an insert; fails when this transaction already wrote the key.
    pub fn insert(&mut self, key: Key, value: Value) -> Result<()> {
        let entry = match self.entries.get(&key) {
            Some(Entry::Put(_)) | Some(Entry::Insert(_)) => {
                return Err(Error::DuplicateKeyInsertion)
            }
            Some(Entry::Cached(Some(_))) | Some(Entry::Locked(Some(Some(_)))) => {
                return Err(Error::DuplicateKeyInsertion)
            }
            // Deleted here first: the key may exist at TiKV, so overwrite.
            Some(Entry::Del) => Entry::Put(value),
            _ => Entry::Insert(value),
        };
        self.entries.insert(key, entry);
        Ok(())
    }

    /// Buffers a delete.
    pub fn delete(&mut self, key: Key) {
        let entry = match self.entries.get(&key) {
            Some(Entry::Insert(_)) | Some(Entry::CheckNotExist) => Entry::CheckNotExist,
            _ => Entry::Del,
        };
        self.entries.insert(key, entry);
    }

    /// Marks `key` locked (it is prewritten as a lock unless written).
    pub fn lock(&mut self, key: Key) {
        match self.entries.get(&key) {
            None => {
                self.entries.insert(key, Entry::Locked(None));
            }
            Some(Entry::Cached(v)) => {
                let v = v.clone();
                self.entries.insert(key, Entry::Locked(Some(v)));
            }
            Some(_) => {}
        }
    }

    /// True when the transaction has something to prewrite.
    pub fn has_mutations(&self) -> bool {
        self.entries
            .values()
            .any(|e| !matches!(e, Entry::Cached(_)))
    }

    /// The mutations to prewrite, in key order. `pessimistically_locked`
    /// tells which keys hold this transaction's pessimistic lock: a key
    /// inserted and then deleted is prewritten as `CheckNotExists` (no
    /// lock), unless it is pessimistically locked, where it becomes a
    /// `Lock` (the pessimistic lock must turn into a prewrite lock, or the
    /// prewrite's pessimistic check and the primary would have nothing to
    /// stand on).
    pub fn mutations(
        &self,
        pessimistically_locked: impl Fn(&Key) -> bool,
    ) -> Vec<kvrpcpb::Mutation> {
        self.entries
            .iter()
            .filter_map(|(key, entry)| {
                let (op, value) = match entry {
                    Entry::Cached(_) => return None,
                    Entry::Put(v) => (kvrpcpb::Op::Put, v.clone()),
                    Entry::Insert(v) => (kvrpcpb::Op::Insert, v.clone()),
                    Entry::Del => (kvrpcpb::Op::Del, Vec::new()),
                    Entry::CheckNotExist if pessimistically_locked(key) => {
                        (kvrpcpb::Op::Lock, Vec::new())
                    }
                    Entry::CheckNotExist => (kvrpcpb::Op::CheckNotExists, Vec::new()),
                    Entry::Locked(_) => (kvrpcpb::Op::Lock, Vec::new()),
                };
                Some(kvrpcpb::Mutation {
                    op: op as i32,
                    key: key.as_bytes().to_vec(),
                    value,
                    ..Default::default()
                })
            })
            .collect()
    }

    /// Merges TiKV's scan result over `[start, end)` (empty end: unbounded)
    /// with this transaction's writes in that range, in scan order, at most
    /// `limit` pairs.
    pub fn merge_scan(
        &self,
        fetched: Vec<KvPair>,
        start: &Key,
        end: &Key,
        limit: u32,
        reverse: bool,
    ) -> Vec<KvPair> {
        let mut merged: BTreeMap<Key, Value> = fetched.into_iter().map(|p| (p.0, p.1)).collect();
        for (key, entry) in self.entries.range(start.clone()..) {
            if !end.is_empty() && key >= end {
                break;
            }
            match entry {
                Entry::Put(v) | Entry::Insert(v) => {
                    merged.insert(key.clone(), v.clone());
                }
                Entry::Del | Entry::CheckNotExist => {
                    merged.remove(key);
                }
                _ => {}
            }
        }
        let pairs = merged.into_iter().map(|(k, v)| KvPair(k, v));
        let limit = limit as usize;
        if reverse {
            pairs.rev().take(limit).collect()
        } else {
            pairs.take(limit).collect()
        }
    }

    /// How many keys in `[start, end)` this transaction deleted (a scan
    /// fetches that many more so the limit still fills).
    pub fn deletes_in(&self, start: &Key, end: &Key) -> u32 {
        self.entries
            .range(start.clone()..)
            .take_while(|(k, _)| end.is_empty() || *k < end)
            .filter(|(_, e)| matches!(e, Entry::Del | Entry::CheckNotExist))
            .count() as u32
    }
}

/// True for a mutation that leaves a lock at prewrite (everything but
/// `CheckNotExists`, which only checks).
pub fn takes_lock(mutation: &kvrpcpb::Mutation) -> bool {
    mutation.op != kvrpcpb::Op::CheckNotExists as i32
}

/// The commit's primary: `fixed` (a pessimistic transaction's first locked
/// key) when it is among the mutations that take a lock, otherwise the
/// first mutation that takes a lock, in key order. `None` when no mutation
/// takes a lock (the transaction only checks that keys do not exist).
pub fn choose_primary(fixed: Option<&Key>, mutations: &[kvrpcpb::Mutation]) -> Option<Key> {
    let locking = || mutations.iter().filter(|m| takes_lock(m));
    if let Some(fixed) = fixed {
        if locking().any(|m| m.key.as_slice() == fixed.as_bytes()) {
            return Some(fixed.clone());
        }
    }
    locking().next().map(|m| Key::from(m.key.clone()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_win_over_reads_and_make_mutations() {
        let mut b = Buffer::default();
        b.cache("a".into(), Some(b"1".to_vec()));
        b.put("b".into(), b"2".to_vec());
        b.delete("c".into());
        b.lock("d".into());
        b.cache("b".into(), None);
        assert_eq!(b.get(&"b".into()), BufferedRead::Known(Some(b"2".to_vec())));
        assert_eq!(b.get(&"d".into()), BufferedRead::Unknown);
        assert_eq!(b.primary_key(), None);
        let ops: Vec<i32> = b.mutations(|_| false).iter().map(|m| m.op).collect();
        assert_eq!(
            ops,
            vec![
                kvrpcpb::Op::Put as i32,
                kvrpcpb::Op::Del as i32,
                kvrpcpb::Op::Lock as i32
            ]
        );
    }

    #[test]
    fn insert_rules() {
        let mut b = Buffer::default();
        b.put("a".into(), vec![1]);
        assert!(matches!(
            b.insert("a".into(), vec![2]),
            Err(Error::DuplicateKeyInsertion)
        ));
        b.insert("n".into(), vec![1]).unwrap();
        b.delete("n".into());
        assert_eq!(
            b.mutations(|_| false)[1].op,
            kvrpcpb::Op::CheckNotExists as i32
        );
        b.delete("x".into());
        b.insert("x".into(), vec![3]).unwrap();
        assert_eq!(b.mutations(|_| false)[2].op, kvrpcpb::Op::Put as i32);
    }

    #[test]
    fn the_primary_is_a_key_that_takes_a_lock() {
        let mut b = Buffer::default();
        b.insert("a".into(), vec![1]).unwrap();
        b.delete("a".into());
        b.put("b".into(), vec![2]);
        let mutations = b.mutations(|_| false);
        assert_eq!(mutations[0].op, kvrpcpb::Op::CheckNotExists as i32);
        assert_eq!(choose_primary(None, &mutations), Some(Key::from("b")));
        // A fixed primary that takes a lock stays.
        assert_eq!(
            choose_primary(Some(&Key::from("b")), &mutations),
            Some(Key::from("b"))
        );
        // One that does not is replaced.
        assert_eq!(
            choose_primary(Some(&Key::from("a")), &mutations),
            Some(Key::from("b"))
        );
        // Pessimistically locked, an inserted-then-deleted key is a Lock.
        let locked = b.mutations(|k| k == &Key::from("a"));
        assert_eq!(locked[0].op, kvrpcpb::Op::Lock as i32);
        assert_eq!(
            choose_primary(Some(&Key::from("a")), &locked),
            Some(Key::from("a"))
        );
        // Only checks: no primary.
        let mut only = Buffer::default();
        only.insert("n".into(), vec![1]).unwrap();
        only.delete("n".into());
        assert_eq!(choose_primary(None, &only.mutations(|_| false)), None);
        // Writes never fix the primary by themselves.
        assert_eq!(b.primary_key(), None);
    }

    #[test]
    fn scans_merge_local_writes() {
        let mut b = Buffer::default();
        b.put("b".into(), b"new".to_vec());
        b.delete("c".into());
        let fetched = vec![KvPair::new("a", "1"), KvPair::new("c", "3")];
        let out = b.merge_scan(fetched, &"a".into(), &Key::EMPTY, 10, false);
        assert_eq!(out, vec![KvPair::new("a", "1"), KvPair::new("b", "new")]);
        let rev = b.merge_scan(
            vec![KvPair::new("a", "1")],
            &"a".into(),
            &Key::EMPTY,
            1,
            true,
        );
        assert_eq!(rev, vec![KvPair::new("b", "new")]);
        assert_eq!(b.deletes_in(&"a".into(), &"z".into()), 1);
    }
}
