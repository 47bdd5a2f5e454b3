//! The paging loop raw and transactional scans share: a scan request covers
//! one Region piece, so a scan over a range sends one request a page, each
//! continuing where the piece the last one served ended (which follows
//! Region splits seen during retries), until the limit or the range's end.

use std::future::Future;

use super::base::ResponseWithShard;
use super::traits::{strongest_shard_error, HasKeyErrors};
use crate::Result;

/// What one page of a scan returned: its items, and where the walk goes on
/// (the end of the piece it served, in the request's own convention: the
/// upper bound forward, the lower bound in reverse; `None` when the page
/// served no piece).
pub(crate) type Page<T> = (Vec<T>, Option<Vec<u8>>);

/// A scan response with the piece it served, `(start_key, end_key)`.
pub(crate) type ScanPiece<R> = ResponseWithShard<R, (Vec<u8>, Vec<u8>)>;

/// The page the pieces of one scan plan make (`preserve_shard` keeps each
/// response's piece, `(start_key, end_key)` in the request's convention, so
/// a piece's `end_key` is where the walk goes on): their items in order,
/// or the strongest of their key errors.
pub(crate) fn page_of<R: HasKeyErrors, T>(
    pieces: Vec<ScanPiece<R>>,
    mut items_of: impl FnMut(R) -> Vec<T>,
) -> Result<Page<T>> {
    let (mut items, mut next) = (Vec::new(), None);
    for ResponseWithShard(mut response, (_, piece_end)) in pieces {
        if let Some(errors) = response.key_errors() {
            return Err(strongest_shard_error(errors));
        }
        let piece_items = items_of(response);
        if items.is_empty() {
            items = piece_items;
        } else {
            items.extend(piece_items);
        }
        next = Some(piece_end);
    }
    Ok((items, next))
}

/// Scans `[start, end)` (empty `end`: unbounded) in pages, forward or in
/// reverse, at most `limit` items. `page(cursor, remaining)` reads one page
/// from `cursor` (the lower bound forward, the upper bound in reverse) with
/// at most `remaining` items.
pub(crate) async fn scan_pages<T, F, Fut>(
    start: &[u8],
    end: &[u8],
    limit: u32,
    reverse: bool,
    mut page: F,
) -> Result<Vec<T>>
where
    F: FnMut(Vec<u8>, u32) -> Fut,
    Fut: Future<Output = Result<Page<T>>>,
{
    let mut out = Vec::new();
    if limit == 0 || (!end.is_empty() && start == end) {
        return Ok(out);
    }
    let mut cursor = if reverse {
        end.to_vec()
    } else {
        start.to_vec()
    };
    loop {
        let remaining = limit.saturating_sub(out.len() as u32);
        let (items, next) = page(cursor, remaining).await?;
        // Pairs are large (a pair's unused error field is most of it): the
        // first page's are moved in, not copied.
        if out.is_empty() {
            out = items;
        } else {
            out.extend(items);
        }
        let Some(next) = next else {
            return Ok(out);
        };
        out.truncate(limit as usize);
        let at_the_end = if reverse {
            // The piece reached the range's lower bound or the key space's
            // start.
            next.is_empty() || next.as_slice() <= start
        } else {
            next.is_empty() || (!end.is_empty() && next.as_slice() >= end)
        };
        if at_the_end || out.len() as u32 >= limit {
            return Ok(out);
        }
        cursor = next;
    }
}

/// Splits `ranges` (`[start, end)`, empty end unbounded) into layers of
/// pairwise disjoint, non-empty ranges, by index, each layer sorted by start:
/// greedy interval colouring, so the number of layers is the largest number
/// of ranges covering one key (1 when no two overlap). Empty ranges are in
/// no layer.
pub(crate) fn disjoint_layers(ranges: &[(Vec<u8>, Vec<u8>)]) -> Vec<Vec<usize>> {
    let mut order: Vec<usize> = (0..ranges.len())
        .filter(|&i| {
            let (s, e) = &ranges[i];
            e.is_empty() || s < e
        })
        .collect();
    order.sort_by(|&a, &b| ranges[a].0.cmp(&ranges[b].0));
    let mut layers: Vec<Vec<usize>> = Vec::new();
    for i in order {
        let start = &ranges[i].0;
        let free = layers.iter_mut().find(|layer| {
            layer.last().is_some_and(|&last| {
                let end = &ranges[last].1;
                !end.is_empty() && end <= start
            })
        });
        match free {
            Some(layer) => layer.push(i),
            None => layers.push(vec![i]),
        }
    }
    layers
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The Region pieces `[, c)`, `[c, f)`, `[f, )`: the one holding
    /// `cursor` forward, the one below the exclusive upper bound `cursor`
    /// in reverse (empty: the end of the key space).
    fn piece_of(cursor: &[u8], reverse: bool) -> (Vec<u8>, Vec<u8>) {
        let (c, f): (&[u8], &[u8]) = (b"c", b"f");
        let last = if reverse {
            cursor.is_empty() || cursor > f
        } else {
            cursor >= f
        };
        let middle = if reverse { cursor > c } else { cursor >= c };
        let (lo, hi): (&[u8], &[u8]) = if last {
            (f, b"")
        } else if middle {
            (c, f)
        } else {
            (b"", c)
        };
        (lo.to_vec(), hi.to_vec())
    }

    async fn run(start: &[u8], end: &[u8], limit: u32, reverse: bool) -> (Vec<Vec<u8>>, usize) {
        let keys: Vec<Vec<u8>> = (b'a'..=b'h').map(|k| vec![k]).collect();
        let mut pages = 0;
        let got = scan_pages(start, end, limit, reverse, |cursor, remaining| {
            pages += 1;
            let (lo, hi) = piece_of(&cursor, reverse);
            let in_piece = |k: &Vec<u8>| {
                k.as_slice() >= lo.as_slice() && (hi.is_empty() || k.as_slice() < hi.as_slice())
            };
            let in_range =
                |k: &Vec<u8>| k.as_slice() >= start && (end.is_empty() || k.as_slice() < end);
            let mut items: Vec<Vec<u8>> = keys
                .iter()
                .filter(|k| in_piece(k) && in_range(k))
                .cloned()
                .collect();
            if reverse {
                items.reverse();
            }
            items.truncate(remaining as usize);
            let next = if reverse { lo } else { hi };
            async move { Ok((items, Some(next))) }
        })
        .await
        .unwrap();
        (got, pages)
    }

    #[tokio::test]
    async fn pages_walk_the_pieces_to_the_limit_or_the_end() {
        let keys = |s: &str| s.bytes().map(|b| vec![b]).collect::<Vec<_>>();
        assert_eq!(run(b"b", b"g", 100, false).await, (keys("bcdef"), 3));
        assert_eq!(run(b"b", b"g", 2, false).await, (keys("bc"), 2));
        assert_eq!(run(b"a", b"", 100, false).await, (keys("abcdefgh"), 3));
        assert_eq!(run(b"b", b"g", 100, true).await, (keys("fedcb"), 3));
        assert_eq!(run(b"b", b"g", 3, true).await, (keys("fed"), 2));
        assert_eq!(run(b"c", b"c", 10, false).await, (Vec::new(), 0));
        assert_eq!(run(b"a", b"b", 0, false).await, (Vec::new(), 0));
    }
}
