//! The locks' metrics as the instances serve them at `GET /metrics` (Prometheus' text format),
//! summed over the instances for the results table.

/// A sample: metric name, labels (key, value), value.
type Sample<'a> = (&'a str, Vec<(&'a str, &'a str)>, f64);

/// One sample line of the text format: `name{k="v",…} value` (comments and blank lines are
/// `None`). Label values with `"` or `,` are not needed here and not handled.
fn sample(line: &str) -> Option<Sample<'_>> {
    if line.starts_with('#') || line.trim().is_empty() {
        return None;
    }
    let (series, value) = line.rsplit_once(' ')?;
    let value = value.parse().ok()?;
    let (name, labels) = match series.split_once('{') {
        Some((name, rest)) => {
            let labels = rest
                .trim_end_matches('}')
                .split("\",")
                .filter_map(|pair| {
                    let (k, v) = pair.split_once("=\"")?;
                    Some((k, v.trim_end_matches('"')))
                })
                .collect();
            (name, labels)
        }
        None => (series, Vec::new()),
    };
    Some((name, labels, value))
}

/// What the results table shows of the instances' `/metrics` pages.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct LockFigures {
    /// Instances whose page was read.
    pub(crate) pages: usize,
    /// `lock_acquisitions_total{outcome="acquired"}`, every group.
    pub(crate) acquired: f64,
    /// `lock_acquisitions_total{outcome="timeout"}`, every group.
    pub(crate) timeouts: f64,
    /// `lock_losses_total`, every group and reason.
    pub(crate) losses: f64,
    /// The highest `lock_wait_seconds{outcome="acquired",quantile="0.99"}` of any instance and
    /// group.
    pub(crate) wait_p99: f64,
}

impl LockFigures {
    /// Adds one instance's page.
    pub(crate) fn add(&mut self, page: &str) {
        self.pages += 1;
        for (name, labels, value) in page.lines().filter_map(sample) {
            let label = |key: &str| labels.iter().find(|(k, _)| *k == key).map(|(_, v)| *v);
            match (name, label("outcome")) {
                ("lock_acquisitions_total", Some("acquired")) => self.acquired += value,
                ("lock_acquisitions_total", Some("timeout")) => self.timeouts += value,
                ("lock_losses_total", _) => self.losses += value,
                ("lock_wait_seconds", Some("acquired")) if label("quantile") == Some("0.99") => {
                    self.wait_p99 = self.wait_p99.max(value);
                }
                _ => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_page_is_summed() {
        let page = "# TYPE lock_acquisitions_total counter\n\
            lock_acquisitions_total{group=\"stock:<id>\",outcome=\"acquired\"} 7\n\
            lock_acquisitions_total{group=\"stock:<items[].sku>\",outcome=\"acquired\"} 3\n\
            lock_acquisitions_total{group=\"stock:<id>\",outcome=\"timeout\"} 2\n\
            lock_losses_total{group=\"stock:<id>\",reason=\"deleted\"} 1\n\
            lock_wait_seconds{group=\"stock:<id>\",outcome=\"acquired\",quantile=\"0.99\"} 0.25\n\
            lock_wait_seconds{group=\"stock:<id>\",outcome=\"acquired\",quantile=\"0.5\"} 0.5\n\
            lock_renewals_total 4\n";
        let mut figures = LockFigures::default();
        figures.add(page);
        figures.add(page);
        assert_eq!(figures.pages, 2);
        assert_eq!(figures.acquired, 20.0);
        assert_eq!(figures.timeouts, 4.0);
        assert_eq!(figures.losses, 2.0);
        assert_eq!(figures.wait_p99, 0.25);
    }
}
