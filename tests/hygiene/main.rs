//! Repository hygiene: the docs, the repository paths they name, the layers,
//! file sizes, the public API and the behaviour table checked against the
//! code.
//!
//! One test binary of several modules, each the file of its name.

mod source_files;

mod blocking_api;
mod doc_links;
mod docs_pages;
mod file_sizes;
mod layers;
mod plan_docs;
mod public_api;
mod repo_paths;
