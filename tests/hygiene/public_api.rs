//! The public API, item by item, checked against `tests/public-api.txt`, so a
//! change to what users can name is always deliberate.
//!
//! The lister parses the crate's sources with `syn` and walks the module tree
//! from `src/lib.rs`: an item is public when it is `pub` and every module on
//! its path is `pub`, or when a public module re-exports it with `pub use`.
//! For each public type it lists the public fields, enum variants, inherent
//! methods and the traits implemented for it; for each trait its items.
//! Generated protobuf modules (`proto::*`) are listed by name only: their
//! shape is the `.proto` files', checked by `tests/compat/wire.rs`.
//!
//! When the API changes on purpose, regenerate the list and commit it:
//!
//! ```text
//! UPDATE_PUBLIC_API=1 cargo test --all-features --test hygiene public_api
//! ```
//!
//! A second check holds the list to tikv-client 0.4.0's items plus the
//! extensions named in `EXTENSIONS`, each with its reason.
//!
//! This file is long because it holds a whole lister (module walk,
//! re-exports, item shapes) and both checks with their unit tests.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use quote::ToTokens;
use syn::{Attribute, Item, UseTree, Visibility};

/// One parsed module of the crate.
struct Module {
    /// `crate::a::b` as segments (empty for the crate root).
    path: Vec<String>,
    /// Declared `pub` and every parent public.
    reachable: bool,
    /// Features this module is gated on (`#[cfg(feature = "..")]`).
    features: Vec<String>,
    items: Vec<Item>,
    /// Opaque (generated code included from `OUT_DIR`).
    generated: bool,
}

fn is_pub(vis: &Visibility) -> bool {
    matches!(vis, Visibility::Public(_))
}

fn features_of(attrs: &[Attribute]) -> Vec<String> {
    let mut features = Vec::new();
    for attr in attrs.iter().filter(|a| a.path().is_ident("cfg")) {
        let text = attr.meta.to_token_stream().to_string();
        let mut rest = text.as_str();
        while let Some(at) = rest.find("feature = \"") {
            rest = &rest[at + "feature = \"".len()..];
            if let Some(end) = rest.find('"') {
                features.push(rest[..end].to_owned());
                rest = &rest[end..];
            }
        }
    }
    features
}

fn is_test_cfg(attrs: &[Attribute]) -> bool {
    attrs.iter().any(|a| {
        a.path().is_ident("cfg") && {
            let text = a.meta.to_token_stream().to_string();
            text == "cfg (test)" || text.contains("cfg (test")
        }
    })
}

fn has_attr(attrs: &[Attribute], name: &str) -> bool {
    attrs.iter().any(|a| a.path().is_ident(name))
}

/// The folder where the modules `file` declares live (a `mod.rs`/`lib.rs`
/// owns its directory, `x.rs` owns `x/`).
fn module_dir(file: &Path) -> PathBuf {
    let parent = file.parent().unwrap_or(Path::new("."));
    let stem = file.file_stem().and_then(|s| s.to_str()).unwrap_or("");
    if stem == "mod" || stem == "lib" {
        parent.to_path_buf()
    } else {
        parent.join(stem)
    }
}

/// The file holding `mod name;` declared in a module whose own file is
/// `file`.
fn module_file(file: &Path, name: &str, path_attr: Option<String>) -> PathBuf {
    let parent = file.parent().unwrap_or(Path::new("."));
    let dir = module_dir(file);
    if let Some(explicit) = path_attr {
        return parent.join(explicit);
    }
    let flat = dir.join(format!("{name}.rs"));
    if flat.exists() {
        flat
    } else {
        dir.join(name).join("mod.rs")
    }
}

fn path_attr(attrs: &[Attribute]) -> Option<String> {
    attrs
        .iter()
        .find(|a| a.path().is_ident("path"))
        .and_then(|a| {
            if let syn::Meta::NameValue(nv) = &a.meta {
                if let syn::Expr::Lit(syn::ExprLit {
                    lit: syn::Lit::Str(s),
                    ..
                }) = &nv.value
                {
                    return Some(s.value());
                }
            }
            None
        })
}

fn load(
    file: &Path,
    items: Vec<Item>,
    path: Vec<String>,
    reachable: bool,
    features: Vec<String>,
    out: &mut Vec<Module>,
) {
    let mut own = Vec::new();
    for item in items {
        if let Item::Mod(m) = &item {
            if is_test_cfg(&m.attrs) {
                continue;
            }
            let mut child_path = path.clone();
            child_path.push(m.ident.to_string());
            let mut child_features = features.clone();
            child_features.extend(features_of(&m.attrs));
            let child_reachable = reachable && is_pub(&m.vis);
            match &m.content {
                Some((_, inline)) => {
                    let generated = inline
                        .iter()
                        .any(|i| matches!(i, Item::Macro(mac) if mac.mac.path.is_ident("include")));
                    if generated {
                        out.push(Module {
                            path: child_path,
                            reachable: child_reachable,
                            features: child_features,
                            items: Vec::new(),
                            generated: true,
                        });
                    } else {
                        // An inline module's children live in a folder named
                        // for it, as if it were that folder's `mod.rs`.
                        let folder = module_dir(file).join(m.ident.to_string()).join("mod.rs");
                        load(
                            &folder,
                            inline.clone(),
                            child_path,
                            child_reachable,
                            child_features,
                            out,
                        );
                    }
                }
                None => {
                    let child_file = module_file(file, &m.ident.to_string(), path_attr(&m.attrs));
                    let text = std::fs::read_to_string(&child_file)
                        .unwrap_or_else(|e| panic!("reading {}: {e}", child_file.display()));
                    let parsed = syn::parse_file(&text)
                        .unwrap_or_else(|e| panic!("parsing {}: {e}", child_file.display()));
                    load(
                        &child_file,
                        parsed.items,
                        child_path,
                        child_reachable,
                        child_features,
                        out,
                    );
                }
            }
        }
        own.push(item);
    }
    out.push(Module {
        path,
        reachable,
        features,
        items: own,
        generated: false,
    });
}

/// The module of the sealed traits: `pub` so public items may name them in
/// bounds, out of every user's reach, so that their impls (what the crate's
/// own stages offer its retry stage) are not part of the public API.
const SEALED_MODULE: &str = "crate::request::plan::stage";

fn join(path: &[String]) -> String {
    if path.is_empty() {
        "crate".to_owned()
    } else {
        format!("crate::{}", path.join("::"))
    }
}

/// Token text without the spacing quirks that differ between syn versions.
fn tokens(t: &impl ToTokens) -> String {
    t.to_token_stream()
        .to_string()
        .replace(" :: ", "::")
        .replace(" < ", "<")
        .replace("< ", "<")
        .replace(" >", ">")
        .replace(" ,", ",")
        .replace(" : ", ": ")
        .replace("& ", "&")
        .replace(" (", "(")
        .replace("( ", "(")
        .replace(" )", ")")
}

/// The `pub use` leaves of a tree: (exported name, target path).
fn use_leaves(tree: &UseTree, prefix: &mut Vec<String>, out: &mut Vec<(String, Vec<String>)>) {
    match tree {
        UseTree::Path(p) => {
            prefix.push(p.ident.to_string());
            use_leaves(&p.tree, prefix, out);
            prefix.pop();
        }
        UseTree::Name(n) => {
            let mut target = prefix.clone();
            target.push(n.ident.to_string());
            out.push((n.ident.to_string(), target));
        }
        UseTree::Rename(r) => {
            let mut target = prefix.clone();
            target.push(r.ident.to_string());
            out.push((r.rename.to_string(), target));
        }
        UseTree::Glob(_) => {
            let mut target = prefix.clone();
            target.push("*".to_owned());
            out.push(("*".to_owned(), target));
        }
        UseTree::Group(g) => {
            for t in &g.items {
                use_leaves(t, prefix, out);
            }
        }
    }
}

/// Resolves a `use` path written in module `from` to a crate path.
fn resolve(from: &[String], target: &[String]) -> Vec<String> {
    let mut resolved: Vec<String> = Vec::new();
    let mut rest = target;
    match target.first().map(String::as_str) {
        Some("crate") => rest = &target[1..],
        Some("self") => {
            resolved = from.to_vec();
            rest = &target[1..];
        }
        Some("super") => {
            resolved = from.to_vec();
            while rest.first().map(String::as_str) == Some("super") {
                resolved.pop();
                rest = &rest[1..];
            }
        }
        _ => resolved = from.to_vec(),
    }
    resolved.extend(rest.iter().cloned());
    resolved
}

fn describe_fields(fields: &syn::Fields, public_only: bool) -> Vec<String> {
    match fields {
        syn::Fields::Named(named) => named
            .named
            .iter()
            .filter(|f| !public_only || is_pub(&f.vis))
            .map(|f| {
                format!(
                    "{}: {}",
                    f.ident.as_ref().map(|i| i.to_string()).unwrap_or_default(),
                    tokens(&f.ty)
                )
            })
            .collect(),
        syn::Fields::Unnamed(unnamed) => unnamed
            .unnamed
            .iter()
            .enumerate()
            .filter(|(_, f)| !public_only || is_pub(&f.vis))
            .map(|(i, f)| format!("{i}: {}", tokens(&f.ty)))
            .collect(),
        syn::Fields::Unit => Vec::new(),
    }
}

/// Lines describing a public item defined at `def` and visible as `shown`.
fn describe_item(item: &Item, shown: &str, lines: &mut BTreeSet<String>) {
    let ne = |attrs: &[Attribute]| {
        if has_attr(attrs, "non_exhaustive") {
            " #[non_exhaustive]"
        } else {
            ""
        }
    };
    let derives = |attrs: &[Attribute], lines: &mut BTreeSet<String>| {
        for attr in attrs.iter().filter(|a| a.path().is_ident("derive")) {
            let _ = attr.parse_nested_meta(|meta| {
                if let Some(last) = meta.path.segments.last() {
                    lines.insert(format!("impl {} for {shown} (derived)", last.ident));
                }
                Ok(())
            });
        }
    };
    match item {
        Item::Struct(s) => {
            derives(&s.attrs, lines);
            lines.insert(format!(
                "struct {shown}{}{}",
                tokens(&s.generics),
                ne(&s.attrs)
            ));
            for field in describe_fields(&s.fields, true) {
                lines.insert(format!("field {shown}.{field}"));
            }
        }
        Item::Enum(e) => {
            derives(&e.attrs, lines);
            lines.insert(format!(
                "enum {shown}{}{}",
                tokens(&e.generics),
                ne(&e.attrs)
            ));
            for v in &e.variants {
                let fields = describe_fields(&v.fields, false).join(", ");
                lines.insert(format!(
                    "variant {shown}::{}({fields}){}",
                    v.ident,
                    ne(&v.attrs)
                ));
            }
        }
        Item::Trait(t) => {
            lines.insert(format!(
                "trait {shown}{}: {}",
                tokens(&t.generics),
                tokens(&t.supertraits)
            ));
            for ti in &t.items {
                let text = match ti {
                    syn::TraitItem::Fn(f) => format!("fn {}", tokens(&f.sig)),
                    syn::TraitItem::Type(ty) => format!("type {}", ty.ident),
                    syn::TraitItem::Const(c) => format!("const {}: {}", c.ident, tokens(&c.ty)),
                    _ => continue,
                };
                lines.insert(format!("trait-item {shown}::{text}"));
            }
        }
        Item::Fn(f) => {
            lines.insert(format!("fn {shown}: {}", tokens(&f.sig)));
        }
        Item::Const(c) => {
            lines.insert(format!("const {shown}: {}", tokens(&c.ty)));
        }
        Item::Static(s) => {
            lines.insert(format!("static {shown}: {}", tokens(&s.ty)));
        }
        Item::Type(t) => {
            lines.insert(format!("type {shown} = {}", tokens(&t.ty)));
        }
        _ => {}
    }
}

fn item_name_and_vis(item: &Item) -> Option<(String, bool)> {
    let (ident, vis) = match item {
        Item::Struct(s) => (&s.ident, &s.vis),
        Item::Enum(e) => (&e.ident, &e.vis),
        Item::Trait(t) => (&t.ident, &t.vis),
        Item::Fn(f) => (&f.sig.ident, &f.vis),
        Item::Const(c) => (&c.ident, &c.vis),
        Item::Static(s) => (&s.ident, &s.vis),
        Item::Type(t) => (&t.ident, &t.vis),
        Item::Mod(m) => (&m.ident, &m.vis),
        _ => return None,
    };
    Some((ident.to_string(), is_pub(vis)))
}

fn self_type_name(ty: &syn::Type) -> Option<String> {
    match ty {
        syn::Type::Path(p) => p.path.segments.last().map(|s| s.ident.to_string()),
        _ => None,
    }
}

/// The public API as sorted lines.
pub(crate) fn public_api() -> Vec<String> {
    public_api_of(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src/lib.rs"))
}

/// The public API of the crate whose root file is `root`, as sorted lines.
fn public_api_of(root: &Path) -> Vec<String> {
    let root = root.to_path_buf();
    let text = std::fs::read_to_string(&root).expect("the crate's root file");
    let file = syn::parse_file(&text).expect("the crate's root file parses");
    let mut modules = Vec::new();
    load(
        &root,
        file.items,
        Vec::new(),
        true,
        Vec::new(),
        &mut modules,
    );
    let by_path: BTreeMap<Vec<String>, &Module> =
        modules.iter().map(|m| (m.path.clone(), m)).collect();

    // Where each public type is shown: definition (module path, name) ->
    // the public names it is reachable under.
    let mut shown: BTreeMap<(Vec<String>, String), BTreeSet<String>> = BTreeMap::new();
    let mut lines = BTreeSet::new();
    let gate = |features: &[String]| {
        if features.is_empty() {
            String::new()
        } else {
            format!("[{}] ", features.join(","))
        }
    };

    for module in modules.iter().filter(|m| m.reachable) {
        let here = join(&module.path);
        if module.generated {
            lines.insert(format!("{}mod {here} (generated)", gate(&module.features)));
            continue;
        }
        if !module.path.is_empty() {
            lines.insert(format!("{}mod {here}", gate(&module.features)));
        }
        for item in &module.items {
            if let Some((name, public)) = item_name_and_vis(item) {
                if public && !matches!(item, Item::Mod(_)) {
                    shown
                        .entry((module.path.clone(), name.clone()))
                        .or_default()
                        .insert(format!("{here}::{name}"));
                }
            }
            if let Item::Macro(mac) = item {
                if has_attr(&mac.attrs, "macro_export") {
                    if let Some(ident) = &mac.ident {
                        lines.insert(format!("macro crate::{ident}!"));
                    }
                }
            }
            if let Item::Use(u) = item {
                if !is_pub(&u.vis) {
                    continue;
                }
                let mut leaves = Vec::new();
                use_leaves(&u.tree, &mut Vec::new(), &mut leaves);
                for (exported, target) in leaves {
                    let resolved = resolve(&module.path, &target);
                    let (def_module, def_name) = resolved.split_at(resolved.len() - 1);
                    let feature = gate(&features_of(&u.attrs));
                    lines.insert(format!(
                        "{feature}use {here}::{exported} = {}",
                        join(&resolved)
                    ));
                    if exported != "*" {
                        shown
                            .entry((def_module.to_vec(), def_name[0].clone()))
                            .or_default()
                            .insert(format!("{here}::{exported}"));
                    }
                }
            }
        }
    }

    // `pub use` in any module (public or not), to follow re-export chains
    // to the definition.
    let mut aliases: BTreeMap<(Vec<String>, String), Vec<String>> = BTreeMap::new();
    for module in &modules {
        for item in &module.items {
            if let Item::Use(u) = item {
                if !is_pub(&u.vis) {
                    continue;
                }
                let mut leaves = Vec::new();
                use_leaves(&u.tree, &mut Vec::new(), &mut leaves);
                for (exported, target) in leaves {
                    if exported != "*" {
                        aliases.insert(
                            (module.path.clone(), exported),
                            resolve(&module.path, &target),
                        );
                    }
                }
            }
        }
    }

    // Every definition with all the public names it has.
    let mut definitions: BTreeMap<(Vec<String>, String), BTreeSet<String>> = BTreeMap::new();
    for ((start_module, start_name), names) in &shown {
        let (mut def_module, mut name) = (start_module.clone(), start_name.clone());
        for _ in 0..8 {
            let defined_here = by_path.get(&def_module).is_some_and(|m| {
                m.items
                    .iter()
                    .any(|i| item_name_and_vis(i).map(|(n, _)| n).as_ref() == Some(&name))
            });
            if defined_here {
                break;
            }
            match aliases.get(&(def_module.clone(), name.clone())) {
                Some(target) => {
                    let (m, n) = target.split_at(target.len() - 1);
                    def_module = m.to_vec();
                    name = n[0].clone();
                }
                None => break,
            }
        }
        definitions
            .entry((def_module, name))
            .or_default()
            .extend(names.iter().cloned());
    }

    // Details of every definition, at its shortest public name. Types are
    // known by their defining module and name (two crates' `Client`s are
    // two types), and by bare name where that is unique.
    let mut shown_types: BTreeMap<(Vec<String>, String), String> = BTreeMap::new();
    for ((def_module, name), names) in &definitions {
        let Some(module) = by_path.get(def_module) else {
            continue; // re-export of an external item (tonic, prost, ...)
        };
        let Some(first) = names
            .iter()
            .min_by_key(|n| (n.matches("::").count(), n.to_string()))
        else {
            continue;
        };
        for item in &module.items {
            if item_name_and_vis(item).map(|(n, _)| n) == Some(name.clone()) {
                let feature =
                    gate(&[module.features.clone(), features_of(item_attrs(item))].concat());
                let mut item_lines = BTreeSet::new();
                describe_item(item, first, &mut item_lines);
                lines.extend(item_lines.into_iter().map(|l| format!("{feature}{l}")));
                shown_types.insert((def_module.clone(), name.clone()), first.clone());
            }
        }
    }

    // The sealed traits (see SEALED_MODULE): their impls are no part of
    // the public API.
    let sealed_traits: BTreeSet<String> = modules
        .iter()
        .filter(|m| join(&m.path) == SEALED_MODULE)
        .flat_map(|m| &m.items)
        .filter_map(|item| match item {
            Item::Trait(t) => Some(t.ident.to_string()),
            _ => None,
        })
        .collect();
    assert!(
        !sealed_traits.is_empty(),
        "no traits found in {SEALED_MODULE}: update SEALED_MODULE"
    );

    // Inherent methods and trait impls of shown types, wherever the impl is.
    for module in &modules {
        for item in &module.items {
            let Item::Impl(imp) = item else { continue };
            if is_test_cfg(&imp.attrs) {
                continue;
            }
            let Some(ty) = self_type_name(&imp.self_ty) else {
                continue;
            };
            // The type of this module of that name, else the one shown type
            // of that name anywhere.
            let public_name = match shown_types.get(&(module.path.clone(), ty.clone())) {
                Some(name) => name,
                None => {
                    let mut same_name = shown_types
                        .iter()
                        .filter(|((_, name), _)| *name == ty)
                        .map(|(_, shown)| shown);
                    match (same_name.next(), same_name.next()) {
                        (Some(name), None) => name,
                        _ => continue,
                    }
                }
            };
            let feature = gate(&[module.features.clone(), features_of(&imp.attrs)].concat());
            match &imp.trait_ {
                Some((_, trait_path, _)) => {
                    let ident = trait_path.segments.last().map(|s| s.ident.to_string());
                    if ident.is_some_and(|i| sealed_traits.contains(&i)) {
                        continue;
                    }
                    let trait_name = trait_path.segments.last().map(tokens).unwrap_or_default();
                    lines.insert(format!("{feature}impl {trait_name} for {public_name}"));
                    // What the impl yields (`Merge::Out`, `Process::Out`,
                    // `KvRequest::Response`): a plan built by hand names it.
                    for ii in &imp.items {
                        if let syn::ImplItem::Type(t) = ii {
                            lines.insert(format!(
                                "{feature}impl-type {public_name}::<{trait_name}>::{}: {}",
                                t.ident,
                                tokens(&t.ty)
                            ));
                        }
                    }
                }
                None => {
                    for ii in &imp.items {
                        if let syn::ImplItem::Fn(f) = ii {
                            if is_pub(&f.vis) {
                                lines.insert(format!(
                                    "{feature}method {public_name}::{}",
                                    tokens(&f.sig)
                                ));
                            }
                        }
                        if let syn::ImplItem::Const(c) = ii {
                            if is_pub(&c.vis) {
                                lines.insert(format!(
                                    "{feature}const {public_name}::{}: {}",
                                    c.ident,
                                    tokens(&c.ty)
                                ));
                            }
                        }
                    }
                }
            }
        }
    }
    lines.into_iter().collect()
}

fn item_attrs(item: &Item) -> &[Attribute] {
    match item {
        Item::Struct(s) => &s.attrs,
        Item::Enum(e) => &e.attrs,
        Item::Trait(t) => &t.attrs,
        Item::Fn(f) => &f.attrs,
        Item::Const(c) => &c.attrs,
        Item::Static(s) => &s.attrs,
        Item::Type(t) => &t.attrs,
        _ => &[],
    }
}

const SNAPSHOT: &str = "tests/public-api.txt";

#[test]
fn public_api_matches_the_checked_in_list() {
    let current = public_api();
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(SNAPSHOT);
    let rendered = format!("{}\n", current.join("\n"));
    if std::env::var_os("UPDATE_PUBLIC_API").is_some() {
        std::fs::write(&path, &rendered).expect("writing the public API list");
        return;
    }
    let recorded = std::fs::read_to_string(&path).unwrap_or_default();
    let recorded: BTreeSet<&str> = recorded.lines().filter(|l| !l.is_empty()).collect();
    let current: BTreeSet<&str> = current.iter().map(String::as_str).collect();
    let added: Vec<&&str> = current.difference(&recorded).collect();
    let removed: Vec<&&str> = recorded.difference(&current).collect();
    assert!(
        added.is_empty() && removed.is_empty(),
        "the public API changed.\n\nadded:\n  {}\n\nremoved:\n  {}\n\n\
         If this is deliberate, regenerate {SNAPSHOT} with\n  \
         UPDATE_PUBLIC_API=1 cargo test --all-features --test hygiene public_api\n\
         and commit it (say why in CHANGELOG.md).",
        added
            .iter()
            .map(|s| s.to_string())
            .collect::<Vec<_>>()
            .join("\n  "),
        removed
            .iter()
            .map(|s| s.to_string())
            .collect::<Vec<_>>()
            .join("\n  "),
    );
}

#[test]
fn the_lister_sees_public_items_and_skips_private_ones() {
    let api = public_api();
    let has = |needle: &str| api.iter().any(|l| l.contains(needle));
    // A re-exported type, one of its methods and a trait it implements.
    assert!(has("use crate::RawClient = crate::raw::RawClient"));
    assert!(has("RawClient::async fn get(&self"));
    assert!(api
        .iter()
        .any(|l| l.starts_with("impl Clone for crate::") && l.ends_with("RawClient")));
    // An enum's variants, a feature-gated module.
    assert!(has("variant crate::Error::UndeterminedError"));
    assert!(has("variant crate::Failure::Undetermined"));
    assert!(has("[mock] mod crate::mock"));
    // Crate-private helpers never show up.
    assert!(!has("strongest_shard_error"));
    assert!(!has("classify_status_source"));
}

/// tikv-client 0.4.0's public items (kind and path), as this lister reads
/// its sources. Regenerate from an unpacked copy of the crate with
/// `CLIENT_RUST_SRC=<path>/tikv-client-0.4.0 UPDATE_PUBLIC_API=1 cargo test
/// --all-features --test hygiene public_api`.
const CLIENT_RUST_ITEMS: &str = "tests/public-api-tikv-client-0.4.0.txt";

/// Our public items that tikv-client 0.4.0 does not have: a path (an item
/// and everything below it), and why it is public.
const EXTENSIONS: &[(&str, &str)] = &[
    (
        "crate::mock",
        "test doubles for users' unit tests (feature `mock`)",
    ),
    (
        "crate::metrics",
        "Prometheus metrics (feature `prometheus`)",
    ),
    (
        "crate::__internals",
        "the Region cache for this repository's benchmark and memory test (feature \
         `unstable-internals`, hidden, no semver promise)",
    ),
    (
        "crate::guide",
        "the user guides (migration, production) as API docs, like `spec`",
    ),
    (
        "crate::spec",
        "the specifications, readable in the API docs",
    ),
    (
        "crate::proto",
        "the wire types, which custom requests and mocks build",
    ),
    (
        "crate::codec",
        "TiKV's key encoding, for transactional keys and API v2 raw keys",
    ),
    (
        "crate::request::CodecPdClient",
        "the PD view that finds Regions by the keys' encoding, for a caller's own plans \
         in an API v2 keyspace (client-rust's PD client does it inside and is not public)",
    ),
    (
        "crate::Failure",
        "what tikv-plan knows about a failure beyond client-rust's Error variant (the \
         Region, store, address, attempts), reached through Error::failure",
    ),
    (
        "crate::blocking",
        "the blocking clients, for programs without a runtime",
    ),
    (
        "crate::SyncRawClient",
        "the blocking raw client by its root name",
    ),
    (
        "crate::SyncTransactionClient",
        "client-rust main's blocking client",
    ),
    (
        "crate::SyncTransaction",
        "client-rust main's blocking transaction",
    ),
    (
        "crate::SyncSnapshot",
        "client-rust main's blocking snapshot",
    ),
    ("crate::config", "the configuration and its named defaults"),
    ("crate::RpcMode", "configuration: unary or batched RPCs"),
    (
        "crate::RequestTags",
        "request tagging: the resource group, request source, transaction source and \
         resource group tag TiKV reads from each request's context",
    ),
    (
        "crate::RequestSource",
        "request tagging: a request source in client-go's form, for TiKV's per-source \
         metrics",
    ),
    (
        "crate::ReplicaRead",
        "replica reads: which replica a read may go to first",
    ),
    (
        "crate::request::ReplicaRead",
        "replica reads: the same type where the plan stages are",
    ),
    ("crate::SecurityConfig", "configuration: the TLS files"),
    (
        "crate::ErrorSource",
        "error detail: the cause behind an error",
    ),
    (
        "crate::describe_key_error",
        "error detail: a key error in words",
    ),
    (
        "crate::describe_region_error",
        "error detail: a Region error in words",
    ),
    (
        "crate::Mutation",
        "the root path of `transaction::Mutation`",
    ),
    (
        "crate::pd",
        "the PD client (`PdClient`, `PdRpcClient`) that plans and mocks take, \
         its stats and its retry schedule",
    ),
    (
        "crate::store",
        "store clients (`KvClient`, `KvConnect`, `TikvConnect`, `Request`, \
         `RegionStore`) for custom requests and mocks",
    ),
    (
        "crate::region",
        "Regions and their ids, as `PdClient` returns them",
    ),
    (
        "crate::request::RoutingState",
        "the routing state clients share",
    ),
    ("crate::request::RoutingStats", "routing stats"),
    (
        "crate::request::HasKeyErrors",
        "what a custom request's response implements",
    ),
    (
        "crate::request::HasRegionError",
        "what a custom request's response implements",
    ),
    (
        "crate::request::set_context_for_store",
        "what a custom request's `Shardable::apply_store` calls",
    ),
    (
        "crate::raw::RawChecksum",
        "what `RawClient::checksum` returns",
    ),
    (
        "crate::raw::RawClient",
        "the raw client under its root name",
    ),
    (
        "crate::raw::ColumnFamily",
        "the column family where raw requests name it",
    ),
    (
        "crate::transaction::TransactionClient",
        "the transactional client under its root name",
    ),
    (
        "crate::transaction::Timestamp",
        "the timestamp where transactions use it",
    ),
    (
        "crate::transaction::TimestampExt",
        "the timestamp's version conversions beside the timestamp",
    ),
    (
        "crate::transaction::gc",
        "the status GC's `LockResolver::check_txn_status` returns: client-rust \
         returns the same struct and enum without a path to name them by",
    ),
    ("crate::transaction::LockStats", "lock resolution stats"),
    (
        "crate::transaction::LockWait",
        "how long lock requests wait on the server for other transactions' locks",
    ),
    ("crate::transaction::TransactionStats", "transaction stats"),
    (
        "crate::transaction::TransactionStatus",
        "what `Transaction::status` returns",
    ),
    (
        "crate::transaction::as_key_error",
        "the key error inside any `Error`",
    ),
    (
        "crate::transaction::DEFAULT_LOCK_TTL",
        "the lock time-to-live a prewrite sets",
    ),
    ("crate::transaction::MAX_TTL", "the longest a lock lives"),
];

/// The path of an item line (`struct crate::a::B`, `use crate::a::B = ..`):
/// None for members (methods, fields, variants, trait impls, trait items).
fn item_path(line: &str) -> Option<&str> {
    let line = match line.strip_prefix('[') {
        Some(rest) => rest.split_once("] ")?.1,
        None => line,
    };
    let (kind, rest) = line.split_once(' ')?;
    if !matches!(
        kind,
        "struct" | "enum" | "fn" | "trait" | "type" | "const" | "static" | "mod" | "use"
    ) {
        return None;
    }
    let end = rest
        .find(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':' || c == '*'))
        .unwrap_or(rest.len());
    Some(rest[..end].trim_end_matches(':'))
}

/// Every path an item list names: item paths, and both sides of re-exports.
fn named_paths(lines: &[String]) -> BTreeSet<String> {
    let mut paths = BTreeSet::new();
    for line in lines {
        if let Some(path) = item_path(line) {
            paths.insert(path.to_owned());
        }
        if let Some((_, target)) = line.strip_prefix("use ").and_then(|l| l.split_once(" = ")) {
            paths.insert(target.trim().to_owned());
        }
    }
    paths
}

/// The item paths of `ours` that neither `theirs` nor [`EXTENSIONS`] names.
fn unexplained<'a>(ours: &'a [String], theirs: &BTreeSet<String>) -> Vec<&'a str> {
    ours.iter()
        .filter_map(|line| item_path(line))
        .filter(|path| !theirs.contains(*path))
        .filter(|path| {
            !EXTENSIONS.iter().any(|(prefix, _)| {
                *path == *prefix
                    || path
                        .strip_prefix(prefix)
                        .is_some_and(|r| r.starts_with("::"))
            })
        })
        .collect()
}

#[test]
fn every_public_item_is_client_rusts_or_a_named_extension() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let theirs_file = root.join(CLIENT_RUST_ITEMS);
    if let (Some(source), Some(_)) = (
        std::env::var_os("CLIENT_RUST_SRC"),
        std::env::var_os("UPDATE_PUBLIC_API"),
    ) {
        let lib = Path::new(&source).join("src/lib.rs");
        // Every line, signatures included: the members are compared too
        // (`client_rust_members_have_our_signatures`).
        let items = public_api_of(&lib);
        std::fs::write(&theirs_file, format!("{}\n", items.join("\n")))
            .expect("writing tikv-client's item list");
    }
    let theirs: Vec<String> = std::fs::read_to_string(&theirs_file)
        .expect("tikv-client's item list")
        .lines()
        .map(str::to_owned)
        .collect();
    let theirs = named_paths(&theirs);
    assert!(theirs.len() > 100, "{CLIENT_RUST_ITEMS} is too short");
    let ours = public_api();
    let unexplained = unexplained(&ours, &theirs);
    assert!(
        unexplained.is_empty(),
        "public items that tikv-client 0.4.0 does not have and EXTENSIONS does \
         not name:\n  {}\n\nMake them pub(crate), or add them to EXTENSIONS with \
         the reason users need them.",
        unexplained.join("\n  ")
    );
}

#[test]
fn the_item_classifier_reads_paths() {
    assert_eq!(
        item_path("struct crate::pd::PdStats #[non_exhaustive]"),
        Some("crate::pd::PdStats")
    );
    assert_eq!(item_path("[mock] mod crate::mock"), Some("crate::mock"));
    assert_eq!(
        item_path("use crate::Key = crate::kv::Key"),
        Some("crate::Key")
    );
    assert_eq!(
        item_path("fn crate::raw::lowering::new_raw_get_request: fn x()"),
        Some("crate::raw::lowering::new_raw_get_request")
    );
    assert_eq!(
        item_path("method crate::Backoff::fn is_none(&self) -> bool"),
        None
    );
    assert_eq!(item_path("impl Clone for crate::Key (derived)"), None);
    // An engine internal is unexplained; an extension and a client-rust
    // item are not.
    let theirs = named_paths(&["struct crate::Key".to_owned()]);
    let ours = [
        "enum crate::request::DispatchFailure".to_owned(),
        "struct crate::pd::PdStats".to_owned(),
        "struct crate::Key".to_owned(),
    ];
    assert_eq!(
        unexplained(&ours, &theirs),
        vec!["crate::request::DispatchFailure"]
    );
}

/// Members of tikv-client 0.4.0's items (methods, functions, variants,
/// fields) whose shape tikv-plan does not share, each with the reason. A
/// program that uses one of these needs a change; every other member
/// type-checks the same way (same kinds of arguments and result).
const SIGNATURE_DIFFERENCES: &[(&str, &str)] = &[
    (
        "crate::request::Collect::<Merge<kvrpcpb::CheckSecondaryLocksResponse>>::Out",
        "no such impl: see IMPL_DIFFERENCES",
    ),
    (
        "crate::request::PlanBuilder::cleanup_locks",
        "see crate::request::PlanBuilder::all_stores",
    ),
    (
        "crate::request::ResolveLock.timestamp",
        "the stage holds the resolver and the reader's start ts \
         (`resolver`, `caller_start_ts`) instead of a timestamp, PD client and keyspace",
    ),
    (
        "crate::request::ResolveLock.pd_client",
        "see crate::request::ResolveLock.timestamp",
    ),
    (
        "crate::request::ResolveLock.keyspace",
        "see crate::request::ResolveLock.timestamp",
    ),
    (
        "crate::TransactionClient::begin_optimistic",
        "TransactionClient is generic over the PD client, defaulted to PdRpcClient: \
         `Transaction<PdC>` is client-rust's `Transaction` for the default",
    ),
    (
        "crate::TransactionClient::begin_pessimistic",
        "see crate::TransactionClient::begin_optimistic",
    ),
    (
        "crate::TransactionClient::begin_with_options",
        "see crate::TransactionClient::begin_optimistic",
    ),
    (
        "crate::TransactionClient::snapshot",
        "see crate::TransactionClient::begin_optimistic",
    ),
    (
        "crate::request::MergeResponse.phantom",
        "`PhantomData<fn() -> In>` (so the stage is Send and Sync whatever In is); \
         a struct literal writes `phantom: PhantomData` for either",
    ),
    (
        "crate::request::PlanBuilder::all_stores",
        "PlanBuilder has no phase parameter (docs/using.md, \"Where tikv-plan differs\"): the \
         result type names two parameters, not three",
    ),
    (
        "crate::request::PlanBuilder::extract_error",
        "see crate::request::PlanBuilder::all_stores",
    ),
    (
        "crate::request::PlanBuilder::merge",
        "see crate::request::PlanBuilder::all_stores",
    ),
    (
        "crate::request::PlanBuilder::post_process_default",
        "see crate::request::PlanBuilder::all_stores",
    ),
    (
        "crate::request::PlanBuilder::preserve_shard",
        "see crate::request::PlanBuilder::all_stores",
    ),
    (
        "crate::request::PlanBuilder::retry_multi_region",
        "see crate::request::PlanBuilder::all_stores",
    ),
    (
        "crate::request::PlanBuilder::retry_multi_region_preserve_results",
        "see crate::request::PlanBuilder::all_stores",
    ),
    (
        "crate::request::PlanBuilder::resolve_lock",
        "see crate::request::PlanBuilder::all_stores",
    ),
    (
        "crate::request::PlanBuilder::single_region_with_store",
        "returns the builder itself: PlanBuilder has no phase parameter \
         (docs/using.md, \"Where tikv-plan differs\")",
    ),
];

/// A member line's key (`method crate::A::name`, `field crate::A.f`,
/// `variant crate::E::V`, `fn crate::m::f`, `impl-type crate::A::<Tr>::Out`:
/// an associated type of a trait impl) and its signature.
fn member(line: &str) -> Option<(String, String)> {
    let line = match line.strip_prefix('[') {
        Some(rest) => rest.split_once("] ")?.1,
        None => line,
    };
    let (kind, rest) = line.split_once(' ')?;
    match kind {
        "method" => {
            let at = rest.find("fn ")?;
            let (before, sig) = rest.split_at(at);
            let (owner, modifiers) = before.rsplit_once("::")?;
            let name = sig[3..].split(['(', '<']).next()?;
            Some((
                format!("{owner}::{name}"),
                normalize(&format!("{modifiers}{sig}"), owner),
            ))
        }
        "fn" => {
            let (path, sig) = rest.split_once(": ")?;
            Some((path.to_owned(), normalize(sig, "")))
        }
        "field" => {
            let (path, ty) = rest.split_once(": ")?;
            let owner = path.rsplit_once('.').map_or("", |(o, _)| o);
            Some((path.to_owned(), normalize(ty, owner)))
        }
        "impl-type" => {
            let (path, ty) = rest.split_once(": ")?;
            let owner = path.split("::<").next().unwrap_or(path);
            // A generated type keeps its module here: what a hand-built
            // plan yields is `Vec<KvPair>` in client-rust, and the wire
            // type `kvrpcpb::KvPair` is another type of the same name.
            let ty = ty.replace("kvrpcpb::", "kvrpcpb_");
            Some((path.to_owned(), normalize(&ty, owner)))
        }
        "variant" => {
            let end = rest.find('(').unwrap_or(rest.len());
            let (path, fields) = rest.split_at(end);
            let owner = path.rsplit_once("::").map_or("", |(o, _)| o);
            Some((path.to_owned(), normalize_with(fields, owner, true)))
        }
        _ => None,
    }
}

/// A signature in the terms a caller sees: no parameter names (unless
/// `keep_names`: a variant's fields), no `mut`, no `const`, no module paths,
/// no where clause, `Self` as the type's name, client-rust's names for the
/// same types.
fn normalize_with(sig: &str, owner: &str, keep_names: bool) -> String {
    let sig = sig.split(" where ").next().unwrap_or(sig);
    let owner_name = owner.rsplit("::").next().unwrap_or(owner);
    let mut unnamed = String::new();
    let mut rest = sig;
    while let Some(i) = rest.find(['(', ',']) {
        unnamed.push_str(&rest[..=i]);
        rest = rest[i + 1..].trim_start();
        rest = rest.strip_prefix("mut ").unwrap_or(rest);
        if keep_names {
            continue;
        }
        if let Some((name, tail)) = rest.split_once(": ") {
            if !name.is_empty() && name.chars().all(|c| c.is_alphanumeric() || c == '_') {
                rest = tail;
            }
        }
    }
    unnamed.push_str(rest);
    let unnamed = unnamed
        .replace("const fn", "fn")
        .replace("Self", owner_name);
    let word = |c: char| c.is_alphanumeric() || c == '_' || c == ':';
    let mut plain = String::new();
    let mut chars = unnamed.as_str();
    while !chars.is_empty() {
        let len = chars.find(|c: char| !word(c)).unwrap_or(chars.len());
        if len == 0 {
            let c = chars.chars().next().unwrap_or(' ');
            plain.push(c);
            chars = &chars[c.len_utf8()..];
            continue;
        }
        // Module paths go: `kvrpcpb::LockInfo` and `ProtoLockInfo` are one
        // type.
        let path = &chars[..len];
        let name = path.rsplit("::").next().unwrap_or(path);
        plain.push_str(match name {
            "ProtoLockInfo" => "LockInfo",
            "TransactionClient" => "Client",
            n => n,
        });
        chars = &chars[len..];
    }
    plain
        .chars()
        .filter(|c| !c.is_whitespace())
        .collect::<String>()
        .replace(",)", ")")
        .replace(",>", ">")
}

fn normalize(sig: &str, owner: &str) -> String {
    normalize_with(sig, owner, false)
}

/// The definition a re-exported name stands for, following re-exports of
/// re-exports.
fn definition<'a>(target_of: &BTreeMap<&'a str, &'a str>, mut name: &'a str) -> &'a str {
    for _ in 0..8 {
        match target_of.get(name) {
            Some(next) => name = next,
            None => break,
        }
    }
    name
}

/// The members of `lines` by key.
fn members(lines: &[String]) -> BTreeMap<String, String> {
    lines.iter().filter_map(|l| member(l)).collect()
}

#[test]
fn client_rust_members_have_our_signatures() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let theirs: Vec<String> = std::fs::read_to_string(root.join(CLIENT_RUST_ITEMS))
        .expect("tikv-client's item list")
        .lines()
        .map(str::to_owned)
        .collect();
    let theirs = members(&theirs);
    assert!(theirs.len() > 100, "{CLIENT_RUST_ITEMS} lists no members");
    let our_lines = public_api();
    let ours = members(&our_lines);
    // A type is listed at its shortest public name (`crate::Mutation`);
    // client-rust's may be at another of its names
    // (`crate::transaction::Mutation`).
    let mut target_of: BTreeMap<&str, &str> = BTreeMap::new();
    for line in &our_lines {
        if let Some((name, target)) = line.strip_prefix("use ").and_then(|l| l.split_once(" = ")) {
            target_of.insert(name, target.trim());
        }
    }
    let mut names_of: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for name in target_of.keys() {
        names_of
            .entry(definition(&target_of, name))
            .or_default()
            .push(name);
    }
    let ours_at = |key: &str| -> Option<&String> {
        if let Some(sig) = ours.get(key) {
            return Some(sig);
        }
        let (owner, member) = key.rsplit_once("::").or_else(|| key.rsplit_once('.'))?;
        let separator = &key[owner.len()..key.len() - member.len()];
        names_of
            .get(definition(&target_of, owner))?
            .iter()
            .find_map(|alias| ours.get(&format!("{alias}{separator}{member}")))
    };
    let mut unexplained = Vec::new();
    let mut differing = BTreeSet::new();
    for (key, sig) in &theirs {
        let same = ours_at(key).is_some_and(|o| o == sig);
        if same {
            continue;
        }
        differing.insert(key.as_str());
        if !SIGNATURE_DIFFERENCES.iter().any(|(k, _)| k == key) {
            unexplained.push(format!(
                "{key}\n    tikv-client: {sig}\n    tikv-plan:   {}",
                ours_at(key).map_or("(missing)", String::as_str)
            ));
        }
    }
    assert!(
        unexplained.is_empty(),
        "members of tikv-client 0.4.0 that tikv-plan lacks or shapes otherwise:\n{}\n\n\
         Give them client-rust's shape, or add them to SIGNATURE_DIFFERENCES with the reason.",
        unexplained.join("\n")
    );
    let stale: Vec<&str> = SIGNATURE_DIFFERENCES
        .iter()
        .map(|(k, _)| *k)
        .filter(|k| !differing.contains(k))
        .collect();
    assert!(
        stale.is_empty(),
        "SIGNATURE_DIFFERENCES names members that now match: {stale:?}"
    );
}

#[test]
fn impl_types_keep_the_wire_module() {
    let line = |ty: &str| {
        format!("impl-type crate::request::Collect::<Merge<kvrpcpb::RawScanResponse>>::Out: {ty}")
    };
    let (key, ours) = member(&line("Vec<KvPair>")).unwrap();
    assert_eq!(
        key,
        "crate::request::Collect::<Merge<kvrpcpb::RawScanResponse>>::Out"
    );
    assert_eq!(ours, member(&line("Vec<crate::KvPair>")).unwrap().1);
    assert_ne!(ours, member(&line("Vec<kvrpcpb::KvPair>")).unwrap().1);
}

#[test]
fn signatures_are_compared_as_a_caller_sees_them() {
    let (key, sig) =
        member("method crate::KvPair::fn set_key(&mut self, k: impl Into<Key>)").unwrap();
    assert_eq!(key, "crate::KvPair::set_key");
    let (_, ours) =
        member("method crate::KvPair::fn set_key(&mut self, key: impl Into<Key>,)").unwrap();
    assert_eq!(sig, ours);
    let (_, a) = member("method crate::Backoff::const fn no_backoff() -> Self").unwrap();
    let (_, b) = member("method crate::Backoff::fn no_backoff() -> Backoff").unwrap();
    assert_eq!(a, b);
    let (_, a) = member("fn crate::f: fn f(x: kvrpcpb::LockInfo) -> Result<u32>").unwrap();
    let (_, b) = member("fn crate::f: fn f(x: u32) -> Result<u32>").unwrap();
    assert_ne!(a, b, "a different argument type is a difference");
    let (key, _) = member("variant crate::Error::Io(0: std::io::Error)").unwrap();
    assert_eq!(key, "crate::Error::Io");
    let (key, _) = member("field crate::Config.timeout: Duration").unwrap();
    assert_eq!(key, "crate::Config.timeout");
}

/// tikv-client 0.4.0's trait impls that tikv-plan leaves out or writes
/// otherwise, each with the reason (`impl Trait for crate::Type`, as
/// 0.4.0's listing writes it).
const IMPL_DIFFERENCES: &[(&str, &str)] = &[(
    "impl Merge<kvrpcpb::CheckSecondaryLocksResponse> for crate::request::Collect",
    "a merge of the answers alone cannot apply the missing-lock rule (it needs \
         the keys each Region was asked about): client-rust's commits a transaction \
         whose secondary was rolled back (docs/txn.md). `preserve_shard` and \
         `CollectError` give the answers with their keys",
)];

/// `impl Trait for crate::Type` → (trait, type), `(derived)` dropped.
fn impl_line(line: &str) -> Option<(&str, &str)> {
    let rest = line.strip_prefix("impl ")?;
    let rest = rest.strip_suffix(" (derived)").unwrap_or(rest);
    rest.rsplit_once(" for ")
}

#[test]
fn client_rust_impls_exist_in_tikv_plan() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let theirs = std::fs::read_to_string(root.join(CLIENT_RUST_ITEMS)).expect("tikv-client's list");
    let our_lines = public_api();
    let mut target_of: BTreeMap<&str, &str> = BTreeMap::new();
    for line in &our_lines {
        if let Some((name, target)) = line.strip_prefix("use ").and_then(|l| l.split_once(" = ")) {
            target_of.insert(name, target.trim());
        }
    }
    let our_impls: BTreeSet<(&str, &str)> = our_lines.iter().filter_map(|l| impl_line(l)).collect();
    let ours = members(&our_lines);
    // The names a type of client-rust's path has in tikv-plan: its own,
    // and every other name of the same definition.
    let names = |ty: &str| -> Vec<String> {
        let def = definition(&target_of, ty);
        let mut names: Vec<String> = target_of
            .keys()
            .filter(|n| definition(&target_of, n) == def)
            .map(|n| n.to_string())
            .collect();
        names.push(ty.to_owned());
        names.push(def.to_owned());
        names
    };
    let mut missing = Vec::new();
    let mut differing = BTreeSet::new();
    let mut count = 0;
    for line in theirs.lines() {
        let Some((tr, ty)) = impl_line(line) else {
            continue;
        };
        count += 1;
        let found = if tr == "new" {
            // `#[derive(new)]`: a public `new` constructor.
            names(ty)
                .iter()
                .any(|n| ours.contains_key(&format!("{n}::new")))
        } else {
            names(ty)
                .iter()
                .any(|n| our_impls.contains(&(tr, n.as_str())))
        };
        if !found {
            let key = format!("impl {tr} for {ty}");
            if !IMPL_DIFFERENCES.iter().any(|(k, _)| *k == key) {
                missing.push(key.clone());
            }
            differing.insert(key);
        }
    }
    assert!(count > 100, "{CLIENT_RUST_ITEMS} lists no impls");
    assert!(
        missing.is_empty(),
        "trait impls of tikv-client 0.4.0 that tikv-plan lacks:\n  {}\n\n\
         Implement them, or add them to IMPL_DIFFERENCES with the reason.",
        missing.join("\n  ")
    );
    let stale: Vec<&str> = IMPL_DIFFERENCES
        .iter()
        .map(|(k, _)| *k)
        .filter(|k| !differing.contains(*k))
        .collect();
    assert!(
        stale.is_empty(),
        "IMPL_DIFFERENCES names impls that now exist: {stale:?}"
    );
}

#[test]
fn impl_lines_are_read() {
    assert_eq!(
        impl_line("impl Clone for crate::request::CollectWithShard (derived)"),
        Some(("Clone", "crate::request::CollectWithShard"))
    );
    assert_eq!(
        impl_line("impl Merge<ResponseWithShard<A, B>> for crate::request::CollectWithShard"),
        Some((
            "Merge<ResponseWithShard<A, B>>",
            "crate::request::CollectWithShard"
        ))
    );
    assert_eq!(impl_line("struct crate::A"), None);
}
