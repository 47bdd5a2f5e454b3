//! Test doubles (in progress).
