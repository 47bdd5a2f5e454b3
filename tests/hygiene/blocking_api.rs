//! The blocking clients mirror the async ones: every public method of
//! `RawClient`, `TransactionClient`, `Transaction` and `Snapshot` has a
//! method of the same name on `SyncRawClient`, `SyncTransactionClient`,
//! `SyncTransaction` and `SyncSnapshot`, taking the same arguments and
//! returning the same result (the blocking types in place of the async
//! ones), not `async`; and the blocking types have nothing else but the
//! named extras. Read from the public API as the lister of
//! `public_api.rs` sees it in the source.

use std::collections::BTreeMap;

use crate::public_api::public_api;

/// Async type, blocking type.
const PAIRS: [(&str, &str); 4] = [
    ("RawClient", "SyncRawClient"),
    ("TransactionClient", "SyncTransactionClient"),
    ("Transaction", "SyncTransaction"),
    ("Snapshot", "SyncSnapshot"),
];

/// Async methods without a blocking twin, and why.
const NOT_MIRRORED: [(&str, &str); 4] = [
    (
        "RawClient::new_with_pd_client",
        "takes any PdClient (a mock); the blocking client builds its own",
    ),
    (
        "TransactionClient::new_with_pd_client",
        "takes any PdClient (a mock); the blocking client builds its own",
    ),
    (
        "TransactionClient::new_with_keyspace",
        "takes any PdClient (a mock); the blocking client builds its own",
    ),
    (
        "Snapshot::new",
        "wraps an async Transaction; SyncTransactionClient::snapshot builds one",
    ),
];

/// Blocking methods without an async twin.
const EXTRAS: [&str; 2] = [
    "SyncRawClient::async_client",
    "SyncTransactionClient::async_client",
];

/// A method line's parts: whether it is async, its name, its argument
/// types (`&self` as written) and its result, normalized.
#[derive(Debug, PartialEq)]
struct Shape {
    name: String,
    arguments: Vec<String>,
    result: String,
}

/// Splits at the commas outside any brackets.
fn top_level(text: &str, separator: char) -> Vec<String> {
    let mut parts = vec![String::new()];
    let mut depth = 0i32;
    for c in text.chars() {
        match c {
            '(' | '<' | '[' => depth += 1,
            ')' | ']' => depth -= 1,
            // `->` is no closing bracket.
            '>' if !parts.last().is_some_and(|p| p.ends_with('-')) => depth -= 1,
            _ => {}
        }
        if c == separator && depth == 0 {
            parts.push(String::new());
        } else if let Some(last) = parts.last_mut() {
            last.push(c);
        }
    }
    parts
        .into_iter()
        .map(|p| p.trim().to_owned())
        .filter(|p| !p.is_empty())
        .collect()
}

/// The blocking form of an async type's name inside a signature.
fn blocking_types(text: &str) -> String {
    text.replace("std::time::Duration", "Duration")
        .replace("Transaction<PdC>", "SyncTransaction")
        .replace("Snapshot<PdC>", "SyncSnapshot")
        .replace(
            "impl Stream<Item = Result<KvPair>> + Send + 'static",
            "SyncScanIter",
        )
}

/// `fn name(args) -> result` (after `async ` if any) as a [`Shape`].
fn shape(signature: &str) -> (bool, Shape) {
    let asynchronous = signature.starts_with("async ");
    let rest = signature
        .trim_start_matches("async ")
        .trim_start_matches("fn ");
    let open = rest.find('(').expect("a method has arguments");
    let name = rest[..open].split('<').next().unwrap_or("").to_owned();
    // The parenthesis that closes the arguments.
    let mut depth = 0;
    let close = rest[open..]
        .char_indices()
        .find_map(|(i, c)| {
            match c {
                '(' => depth += 1,
                ')' => depth -= 1,
                _ => {}
            }
            (depth == 0).then_some(open + i)
        })
        .expect("the arguments close");
    let arguments = top_level(&rest[open + 1..close], ',')
        .into_iter()
        .map(|argument| match argument.split_once(':') {
            // The type only: names may differ (`_timestamp`).
            Some((_, ty)) => blocking_types(ty.trim()),
            None => argument,
        })
        .collect();
    let result = rest[close + 1..]
        .trim()
        .trim_start_matches("->")
        .trim()
        .to_owned();
    (
        asynchronous,
        Shape {
            name,
            arguments,
            result: blocking_types(&result),
        },
    )
}

/// The methods of `ty` in the public API: name → (async, shape).
fn methods(api: &[String], ty: &str) -> BTreeMap<String, (bool, Shape)> {
    let prefix = format!("method crate::{ty}::");
    api.iter()
        .filter_map(|line| line.strip_prefix(&prefix))
        .map(|signature| {
            let (asynchronous, shape) = shape(signature);
            (shape.name.clone(), (asynchronous, shape))
        })
        .collect()
}

#[test]
fn the_blocking_clients_have_every_method_of_the_async_ones() {
    let api = public_api();
    let mut problems = Vec::new();
    for (async_type, blocking_type) in PAIRS {
        let theirs = methods(&api, async_type);
        let ours = methods(&api, blocking_type);
        assert!(theirs.len() > 5, "{async_type}: only {theirs:?}");
        for (name, (_, shape)) in &theirs {
            let path = format!("{async_type}::{name}");
            if NOT_MIRRORED.iter().any(|(p, _)| *p == path) {
                continue;
            }
            match ours.get(name) {
                None => problems.push(format!("{blocking_type} has no `{name}`")),
                Some((true, _)) => problems.push(format!("{blocking_type}::{name} is async")),
                Some((false, mirror)) if mirror != shape => problems.push(format!(
                    "{blocking_type}::{name} is shaped {mirror:?}, {path} {shape:?}"
                )),
                Some(_) => {}
            }
        }
        for name in ours.keys() {
            let path = format!("{blocking_type}::{name}");
            if !theirs.contains_key(name) && !EXTRAS.contains(&path.as_str()) {
                problems.push(format!("{path} has no async twin and is not in EXTRAS"));
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn signatures_are_read_into_their_parts() {
    let (asynchronous, read) = shape(
        "async fn stale_snapshot(&self, staleness: std::time::Duration, options: \
         TransactionOptions,) -> Result<Snapshot<PdC>>",
    );
    assert!(asynchronous);
    assert_eq!(
        read,
        Shape {
            name: "stale_snapshot".into(),
            arguments: vec![
                "&self".into(),
                "Duration".into(),
                "TransactionOptions".into()
            ],
            result: "Result<SyncSnapshot>".into(),
        }
    );
    let (asynchronous, read) =
        shape("fn new<S: Into<String>>(pd_endpoints: Vec<S>, config: Config) -> Result<Self>");
    assert!(!asynchronous);
    assert_eq!(read.name, "new");
    assert_eq!(read.arguments, ["Vec<S>", "Config"]);
    // A closure's arrow inside an argument does not close a bracket.
    let (_, read) = shape(
        "fn f(&self, g: impl Fn(u8) -> Vec<u8> + Send, n: u32) -> Result<(Option<Value>, bool)>",
    );
    assert_eq!(
        read.arguments,
        ["&self", "impl Fn(u8) -> Vec<u8> + Send", "u32"]
    );
    assert_eq!(read.result, "Result<(Option<Value>, bool)>");
}
