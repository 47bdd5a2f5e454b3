//! The transactional chaos suite: workloads, faults and the run (in progress).
