//! Every message this crate defines has the fields tikv-client 0.4.0's
//! kvproto gives it, with the same field numbers and the same Rust types, so
//! a program written against `tikv_client::proto::*` reads the same fields
//! here. Messages this crate does not define are not checked.
//!
//! `kvproto-fields-tikv-client-0.4.0.txt` lists 0.4.0's fields of the
//! messages we define: one line per field, `package message field tag
//! type`, where `message` is the Rust path inside the package module
//! (`prewrite_request::ForUpdateTsConstraint`), `tag` is the field number
//! (`oneof` for a oneof field, whose cases are listed as the fields of the
//! oneof's enum, `batch_commands_request::request::Cmd`), and `type` is the
//! Rust type with generated types named from the crate root
//! (`Option<kvrpcpb::ExecDetailsV2>`). A message without fields is a line
//! `package message`. The test parses our `src/generated/*.rs` the same way
//! and compares; tikv-client's sources are needed only to rewrite the list:
//!
//! ```text
//! CLIENT_RUST_SRC=~/.cargo/registry/src/<index>/tikv-client-0.4.0 \
//!   UPDATE_KVPROTO_FIELDS=1 cargo test -p tikv-plan-proto --test kvproto_fields
//! ```
//!
//! Fields and messages we have and 0.4.0 does not are in
//! [`DELIBERATE_EXTRAS`], each with its reason. A oneof case whose payload is
//! a message we do not define may be missing (we cannot carry it).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use quote::ToTokens;
use syn::punctuated::Punctuated;
use syn::{Attribute, GenericArgument, Item, LitStr, PathArguments, Token, Type};

/// The listing of 0.4.0's fields, relative to the crate.
const LISTING: &str = "tests/kvproto-fields-tikv-client-0.4.0.txt";

/// The packages we generate (`src/generated/<package>.rs`).
const PACKAGES: [&str; 10] = [
    "deadlock",
    "encryptionpb",
    "errorpb",
    "keyspacepb",
    "kvrpcpb",
    "metapb",
    "pdpb",
    "resource_manager",
    "tikvpb",
    "tracepb",
];

/// Fields (or, with an empty field name, whole messages) that we have and
/// tikv-client 0.4.0 does not: `(package, message, field, reason)`.
const DELIBERATE_EXTRAS: &[(&str, &str, &str, &str)] = &[
    (
        "tikvpb",
        "BatchCommandsResponse",
        "health_feedback",
        "the store's slow score (tag 4, kvproto's), which replica reads use to \
         pass over a slow store; only read, never sent, and a client that \
         skips it decodes the rest the same",
    ),
    (
        "kvrpcpb",
        "HealthFeedback",
        "",
        "the message of BatchCommandsResponse.health_feedback",
    ),
    (
        "errorpb",
        "Error",
        "undetermined_result",
        "a store that cannot tell whether a write applied says so; tikv-plan \
         ends that write undetermined and never re-sends it (tag 22, unused \
         in 0.4.0's errorpb)",
    ),
    (
        "errorpb",
        "UndeterminedResult",
        "",
        "the message of Error.undetermined_result",
    ),
    (
        "errorpb",
        "MaxTimestampNotSynced",
        "reason",
        "why the store's max timestamp is not synced, when it says; 0.4.0's \
         message is empty, and a store that sends no fields decodes the same",
    ),
    (
        "errorpb",
        "MaxTimestampNotSynced",
        "region_id",
        "the Region that answered, when the store says; empty in 0.4.0, \
         decodes the same without it",
    ),
    (
        "tikvpb",
        "BatchCommandsRequest",
        "client_send_time_ns",
        "when the client wrote the batch (tag 3); tikv-plan leaves it 0, \
         which proto3 does not encode, so the bytes are 0.4.0's",
    ),
    (
        "tikvpb",
        "BatchCommandsResponse",
        "tikv_send_time_ns",
        "when the store wrote the batch (tag 5); a store that does not set \
         it decodes the same",
    ),
];

/// A message's fields: name to `(tag, Rust type)`.
type Fields = BTreeMap<String, (String, String)>;

/// Messages (and oneof enums) by `(package, path in the package)`.
#[derive(Debug, Default, Clone, PartialEq)]
struct Listing {
    messages: BTreeMap<(String, String), Fields>,
    /// Which of `messages` are oneof enums (their fields are the cases).
    oneofs: BTreeSet<(String, String)>,
}

impl Listing {
    /// Whether a type from this listing (`kvrpcpb::GetRequest`) is a
    /// message it holds.
    fn defines(&self, rust_type: &str) -> bool {
        rust_type.split_once("::").is_some_and(|(package, path)| {
            self.messages
                .contains_key(&(package.to_owned(), path.to_owned()))
        })
    }

    /// The lines of the listing file, sorted.
    fn to_text(&self) -> String {
        let mut out = String::new();
        for ((package, message), fields) in &self.messages {
            if fields.is_empty() {
                out.push_str(&format!("{package} {message}\n"));
            }
            for (field, (tag, rust_type)) in fields {
                out.push_str(&format!("{package} {message} {field} {tag} {rust_type}\n"));
            }
        }
        out
    }

    /// Reads what [`to_text`](Self::to_text) writes (and `#` comments).
    fn from_text(text: &str) -> Result<Listing, String> {
        let mut listing = Listing::default();
        for (number, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let words: Vec<&str> = line.split(' ').collect();
            let fields = listing
                .messages
                .entry((words[0].to_owned(), words.get(1).unwrap_or(&"").to_string()))
                .or_default();
            match words[..] {
                [_, _] => {}
                [_, _, field, tag, rust_type] => {
                    fields.insert(field.to_owned(), (tag.to_owned(), rust_type.to_owned()));
                }
                _ => return Err(format!("line {}: `{line}` is not 2 or 5 words", number + 1)),
            }
        }
        Ok(listing)
    }
}

/// Adds the messages and oneofs of one generated package file.
fn parse_package(listing: &mut Listing, package: &str, source: &str) -> Result<(), String> {
    let file = syn::parse_file(source).map_err(|e| format!("{package}: {e}"))?;
    walk(listing, &file.items, &[package.to_owned()])
}

/// `module` is the package and the modules inside it (`kvrpcpb`,
/// `prewrite_request`): types named in it are relative to it.
fn walk(listing: &mut Listing, items: &[Item], module: &[String]) -> Result<(), String> {
    let path_of = |name: &syn::Ident| {
        let mut path: Vec<String> = module[1..].to_vec();
        path.push(name.to_string());
        (module[0].clone(), path.join("::"))
    };
    for item in items {
        match item {
            Item::Struct(s) if derives(&s.attrs, "Message") => {
                let key = path_of(&s.ident);
                let mut fields = Fields::new();
                for field in &s.fields {
                    let (Some(name), Some(attr)) = (&field.ident, prost_attr(&field.attrs)) else {
                        continue;
                    };
                    let (tag, oneof) = tag_of(attr)?;
                    let tag = if oneof { "oneof".to_owned() } else { tag };
                    fields.insert(name.to_string(), (tag, render(&field.ty, module)));
                }
                listing.messages.insert(key, fields);
            }
            Item::Enum(e) if derives(&e.attrs, "Oneof") => {
                let key = path_of(&e.ident);
                let mut cases = Fields::new();
                for variant in &e.variants {
                    let (Some(attr), Some(field)) =
                        (prost_attr(&variant.attrs), variant.fields.iter().next())
                    else {
                        continue;
                    };
                    let (tag, _) = tag_of(attr)?;
                    cases.insert(variant.ident.to_string(), (tag, render(&field.ty, module)));
                }
                listing.oneofs.insert(key.clone());
                listing.messages.insert(key, cases);
            }
            Item::Mod(m) => {
                if let Some((_, items)) = &m.content {
                    let mut inner = module.to_vec();
                    inner.push(m.ident.to_string());
                    walk(listing, items, &inner)?;
                }
            }
            _ => {}
        }
    }
    Ok(())
}

/// Whether `#[derive(..)]` names `trait_name` (`::prost::Message`).
fn derives(attrs: &[Attribute], trait_name: &str) -> bool {
    attrs
        .iter()
        .filter(|a| a.path().is_ident("derive"))
        .filter_map(|a| {
            a.parse_args_with(Punctuated::<syn::Path, Token![,]>::parse_terminated)
                .ok()
        })
        .flatten()
        .any(|p| p.segments.last().is_some_and(|s| s.ident == trait_name))
}

fn prost_attr(attrs: &[Attribute]) -> Option<&Attribute> {
    attrs.iter().find(|a| a.path().is_ident("prost"))
}

/// The `tag` of a `#[prost(..)]` attribute, or its `tags` and `true` for a
/// oneof field.
fn tag_of(attr: &Attribute) -> Result<(String, bool), String> {
    let mut tag = None;
    let mut oneof = false;
    attr.parse_nested_meta(|meta| {
        if meta.input.peek(Token![=]) {
            let value: LitStr = meta.value()?.parse()?;
            if meta.path.is_ident("tag") {
                tag = Some(value.value());
            } else if meta.path.is_ident("tags") {
                tag = Some(value.value());
                oneof = true;
            }
        }
        Ok(())
    })
    .map_err(|e| e.to_string())?;
    let tag = tag.ok_or_else(|| format!("no tag in {}", attr.to_token_stream()))?;
    Ok((tag, oneof))
}

/// Scalar types prost names without a path.
const PRIMITIVES: [&str; 8] = ["bool", "i32", "i64", "u32", "u64", "f32", "f64", "u8"];

/// A field's type as a program sees it: std and prost paths by their last
/// name (`Vec`, `Option`, `String`, `HashMap`), generated types from the
/// crate root (`super::errorpb::Error` in `kvrpcpb` is `errorpb::Error`).
fn render(ty: &Type, module: &[String]) -> String {
    let Type::Path(type_path) = ty else {
        return ty.to_token_stream().to_string().replace(' ', "");
    };
    let path = &type_path.path;
    let Some(last) = path.segments.last() else {
        return String::new();
    };
    let args = match &last.arguments {
        PathArguments::AngleBracketed(generic) => {
            let args: Vec<String> = generic
                .args
                .iter()
                .map(|arg| match arg {
                    GenericArgument::Type(t) => render(t, module),
                    other => other.to_token_stream().to_string().replace(' ', ""),
                })
                .collect();
            format!("<{}>", args.join(","))
        }
        _ => String::new(),
    };
    if path.leading_colon.is_some() {
        return format!("{}{args}", last.ident);
    }
    let names: Vec<String> = path.segments.iter().map(|s| s.ident.to_string()).collect();
    if names.len() == 1 && PRIMITIVES.contains(&names[0].as_str()) {
        return format!("{}{args}", names[0]);
    }
    let supers = names.iter().take_while(|n| *n == "super").count();
    let mut full = module[..module.len().saturating_sub(supers)].to_vec();
    full.extend(names[supers..].iter().cloned());
    format!("{}{args}", full.join("::"))
}

/// What is wrong with `ours` against `theirs` (0.4.0's listing), one
/// sentence per problem; empty when every message we define agrees.
fn compare(ours: &Listing, theirs: &Listing, extras: &[(&str, &str, &str, &str)]) -> Vec<String> {
    let mut problems = Vec::new();
    let mut used = BTreeSet::new();
    let mut extra = |package: &str, message: &str, field: &str| {
        let found = extras
            .iter()
            .position(|(p, m, f, _)| (*p, *m, *f) == (package, message, field));
        if let Some(i) = found {
            used.insert(i);
        }
        found.is_some()
    };
    for ((package, message), fields) in &ours.messages {
        let Some(listed) = theirs.messages.get(&(package.clone(), message.clone())) else {
            if !extra(package, message, "") {
                problems.push(format!(
                    "{package}::{message} is not in {LISTING}: rewrite the listing \
                     (see this file's header), or, if tikv-client 0.4.0 has no such \
                     message, add it to DELIBERATE_EXTRAS with the reason"
                ));
            }
            continue;
        };
        for (field, (tag, rust_type)) in listed {
            match fields.get(field) {
                Some((our_tag, our_type)) if our_tag == tag && our_type == rust_type => {}
                Some((our_tag, our_type)) => problems.push(format!(
                    "{package}::{message}.{field} is tag {our_tag}, {our_type}; \
                     tikv-client 0.4.0 has tag {tag}, {rust_type}"
                )),
                // A oneof case carrying a message we do not define.
                None if ours.oneofs.contains(&(package.clone(), message.clone()))
                    && !ours.defines(rust_type) => {}
                None => problems.push(format!(
                    "{package}::{message} lacks {field} (tag {tag}, {rust_type}), \
                     which tikv-client 0.4.0 has"
                )),
            }
        }
        for field in fields.keys().filter(|f| !listed.contains_key(*f)) {
            if !extra(package, message, field) {
                problems.push(format!(
                    "{package}::{message}.{field} is not in tikv-client 0.4.0: remove \
                     it, or add it to DELIBERATE_EXTRAS with the reason"
                ));
            }
        }
    }
    for key in theirs
        .messages
        .keys()
        .filter(|k| !ours.messages.contains_key(*k))
    {
        problems.push(format!(
            "{LISTING} lists {}::{}, which we do not define: rewrite the listing",
            key.0, key.1
        ));
    }
    for (i, (package, message, field, _)) in extras.iter().enumerate() {
        if !used.contains(&i) {
            problems.push(format!(
                "DELIBERATE_EXTRAS names {package}::{message} {field}, which is not \
                 an extra (any more): remove the entry"
            ));
        }
    }
    problems
}

fn crate_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Parses `<dir>/<package>.rs` for each of our packages.
fn parse_dir(dir: &Path) -> Listing {
    let mut listing = Listing::default();
    for package in PACKAGES {
        let path = dir.join(format!("{package}.rs"));
        let source = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
        parse_package(&mut listing, package, &source).unwrap();
    }
    listing
}

/// 0.4.0's fields of the messages `ours` defines, from its generated code.
fn client_rust_listing(src: &Path, ours: &Listing) -> Listing {
    let all = parse_dir(&src.join("src/generated"));
    Listing {
        messages: all
            .messages
            .into_iter()
            .filter(|(key, _)| ours.messages.contains_key(key))
            .collect(),
        oneofs: all.oneofs,
    }
}

const LISTING_HEADER: &str = "\
# tikv-client 0.4.0's fields (kvproto as it generated them) of the messages
# tikv-plan-proto defines: package, message, field, tag, Rust type; a message
# without fields is a line of its own. Written by tests/kvproto_fields.rs
# (CLIENT_RUST_SRC=<tikv-client-0.4.0> UPDATE_KVPROTO_FIELDS=1); do not edit.
";

#[test]
fn our_messages_have_the_fields_of_tikv_client_0_4_0() {
    let ours = parse_dir(&crate_dir().join("src/generated"));
    let listing_path = crate_dir().join(LISTING);
    if std::env::var_os("UPDATE_KVPROTO_FIELDS").is_some() {
        let src = std::env::var_os("CLIENT_RUST_SRC").expect(
            "UPDATE_KVPROTO_FIELDS needs CLIENT_RUST_SRC, the tikv-client 0.4.0 source \
             directory (~/.cargo/registry/src/<index>/tikv-client-0.4.0)",
        );
        let theirs = client_rust_listing(Path::new(&src), &ours);
        // Renamed into place: the other tests read it meanwhile.
        let fresh = listing_path.with_extension("txt.new");
        std::fs::write(&fresh, format!("{LISTING_HEADER}{}", theirs.to_text())).unwrap();
        std::fs::rename(&fresh, &listing_path).unwrap();
    }
    let text = std::fs::read_to_string(&listing_path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", listing_path.display()));
    let theirs = Listing::from_text(&text).unwrap();
    assert!(
        theirs.messages.len() > 100,
        "{LISTING} lists only {} messages",
        theirs.messages.len()
    );
    let problems = compare(&ours, &theirs, DELIBERATE_EXTRAS);
    assert!(
        problems.is_empty(),
        "our generated messages differ from tikv-client 0.4.0's:\n  {}",
        problems.join("\n  ")
    );
}

#[test]
fn every_deliberate_extra_has_a_reason() {
    for (package, message, field, reason) in DELIBERATE_EXTRAS {
        assert!(
            reason.len() > 20,
            "DELIBERATE_EXTRAS: {package}::{message} {field} needs a reason"
        );
    }
}

/// Ours and the checked-in listing, for the tests that break one of them.
fn ours_and_theirs() -> (Listing, Listing) {
    let ours = parse_dir(&crate_dir().join("src/generated"));
    let text = std::fs::read_to_string(crate_dir().join(LISTING)).unwrap();
    (ours, Listing::from_text(&text).unwrap())
}

fn key(package: &str, message: &str) -> (String, String) {
    (package.to_owned(), message.to_owned())
}

#[test]
fn a_missing_field_is_flagged() {
    let (mut ours, theirs) = ours_and_theirs();
    assert!(compare(&ours, &theirs, DELIBERATE_EXTRAS).is_empty());
    ours.messages
        .get_mut(&key("kvrpcpb", "GetResponse"))
        .unwrap()
        .remove("exec_details_v2")
        .unwrap();
    let problems = compare(&ours, &theirs, DELIBERATE_EXTRAS);
    assert_eq!(
        problems,
        ["kvrpcpb::GetResponse lacks exec_details_v2 (tag 6, \
          Option<kvrpcpb::ExecDetailsV2>), which tikv-client 0.4.0 has"]
    );
}

#[test]
fn a_missing_oneof_case_is_flagged_when_we_define_its_message() {
    let (mut ours, theirs) = ours_and_theirs();
    let cmd = key("tikvpb", "batch_commands_request::request::Cmd");
    // We do not define coprocessor::Request: its case may be missing.
    assert!(!ours.messages[&cmd].contains_key("Coprocessor"));
    assert!(theirs.messages[&cmd].contains_key("Coprocessor"));
    ours.messages
        .get_mut(&cmd)
        .unwrap()
        .remove("RawGet")
        .unwrap();
    let problems = compare(&ours, &theirs, DELIBERATE_EXTRAS);
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert!(problems[0].contains("lacks RawGet (tag 13, kvrpcpb::RawGetRequest)"));
}

#[test]
fn a_changed_tag_or_type_is_flagged() {
    let (mut ours, theirs) = ours_and_theirs();
    let store = ours.messages.get_mut(&key("metapb", "Store")).unwrap();
    store.insert("node_state".into(), ("13".into(), "u64".into()));
    store.insert("version".into(), ("15".into(), "String".into()));
    let problems = compare(&ours, &theirs, DELIBERATE_EXTRAS);
    assert_eq!(
        problems,
        [
            "metapb::Store.node_state is tag 13, u64; tikv-client 0.4.0 has tag 13, i32",
            "metapb::Store.version is tag 15, String; tikv-client 0.4.0 has tag 5, String",
        ]
    );
}

#[test]
fn extras_must_be_listed_and_listed_extras_must_exist() {
    let (mut ours, theirs) = ours_and_theirs();
    ours.messages
        .get_mut(&key("kvrpcpb", "Context"))
        .unwrap()
        .insert("shiny".into(), ("99".into(), "bool".into()));
    ours.messages
        .get_mut(&key("errorpb", "Error"))
        .unwrap()
        .remove("undetermined_result");
    ours.messages.insert(key("kvrpcpb", "Novel"), Fields::new());
    let problems = compare(&ours, &theirs, DELIBERATE_EXTRAS);
    assert_eq!(problems.len(), 3, "{problems:?}");
    assert!(problems[0].starts_with("kvrpcpb::Context.shiny is not in tikv-client 0.4.0"));
    assert!(problems[1].starts_with("kvrpcpb::Novel is not in tests/kvproto-fields"));
    assert!(problems[2].starts_with("DELIBERATE_EXTRAS names errorpb::Error undetermined_result"));
}

#[test]
fn a_listed_message_we_no_longer_define_is_flagged() {
    let (mut ours, theirs) = ours_and_theirs();
    ours.messages.remove(&key("pdpb", "SlowTrend")).unwrap();
    let problems = compare(&ours, &theirs, DELIBERATE_EXTRAS);
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert!(problems[0].contains("lists pdpb::SlowTrend, which we do not define"));
}

#[test]
fn the_parser_reads_prost_fields_oneofs_and_type_paths() {
    let source = r#"
        #[derive(Clone, PartialEq, ::prost::Message)]
        pub struct Outer {
            #[prost(message, optional, tag = "1")]
            pub region: ::core::option::Option<super::metapb::Region>,
            #[prost(bytes = "vec", repeated, tag = "2")]
            pub keys: ::prost::alloc::vec::Vec<::prost::alloc::vec::Vec<u8>>,
            #[prost(enumeration = "Kind", tag = "3")]
            pub r#type: i32,
            #[prost(map = "string, message", tag = "4")]
            pub by_name: ::std::collections::HashMap<::prost::alloc::string::String, Outer>,
            #[prost(oneof = "outer::Cmd", tags = "5, 6")]
            pub cmd: ::core::option::Option<outer::Cmd>,
            pub not_a_field: u8,
        }
        pub mod outer {
            #[derive(Clone, PartialEq, ::prost::Oneof)]
            pub enum Cmd {
                #[prost(message, tag = "5")]
                Get(super::super::kvrpcpb::GetRequest),
                #[prost(message, tag = "6")]
                Inner(super::Outer),
            }
            #[derive(Clone, Copy, PartialEq, ::prost::Message)]
            pub struct Empty {}
        }
        pub struct NotAMessage {
            pub x: u64,
        }
    "#;
    let mut listing = Listing::default();
    parse_package(&mut listing, "demo", source).unwrap();
    let text = listing.to_text();
    assert_eq!(
        text,
        "demo Outer by_name 4 HashMap<String,demo::Outer>\n\
         demo Outer cmd oneof Option<demo::outer::Cmd>\n\
         demo Outer keys 2 Vec<Vec<u8>>\n\
         demo Outer r#type 3 i32\n\
         demo Outer region 1 Option<metapb::Region>\n\
         demo outer::Cmd Get 5 kvrpcpb::GetRequest\n\
         demo outer::Cmd Inner 6 demo::Outer\n\
         demo outer::Empty\n"
    );
    assert_eq!(listing.oneofs, BTreeSet::from([key("demo", "outer::Cmd")]));
    assert_eq!(
        Listing::from_text(&text).unwrap().messages,
        listing.messages
    );
}
