//! The request plan (in progress).
