//! The median, shared by the benchmark (`main.rs`) and the plotting
//! program (`bin/plot.rs`), so a picture's medians are the table's.

/// Median of the finite values (mean of the middle two for an even
/// count); NaN when there are none.
pub fn median(values: &[f64]) -> f64 {
    let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}
