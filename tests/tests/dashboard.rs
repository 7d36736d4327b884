//! The Grafana dashboard `dashboards/lock-runtime.json` queries only what the runtime records:
//! every metric name in every query is one of `lock_runtime::metrics`' names (a histogram's with
//! its `_bucket`, `_sum` or `_count` series), every label a query filters or groups by is one
//! that metric carries (its labels in `lock_runtime::metrics`, or Prometheus' own), and every
//! metric has a panel.

use std::collections::BTreeSet;

use lock_runtime::metrics;
use serde_json::Value;

const DASHBOARD: &str = include_str!("../../dashboards/lock-runtime.json");

/// Prometheus' own labels, which every series carries: the scrape's `instance` and `job`.
const SCRAPE_LABELS: [&str; 2] = ["instance", "job"];

/// A metric of `lock_runtime::metrics`: its name, whether it is a histogram, and its labels.
struct Metric {
    name: &'static str,
    histogram: bool,
    labels: &'static [&'static str],
}

/// What `lock_runtime::metrics` records (its module docs' table), from its constants.
fn recorded() -> Vec<Metric> {
    use metrics::{LABEL_GROUP as GROUP, LABEL_OUTCOME as OUTCOME, LABEL_REASON as REASON};
    let metric = |name, histogram, labels| Metric {
        name,
        histogram,
        labels,
    };
    vec![
        metric(metrics::WAIT_SECONDS, true, &[GROUP, OUTCOME]),
        metric(metrics::HOLD_SECONDS, true, &[GROUP]),
        metric(metrics::HANDOVER_SECONDS, true, &[GROUP]),
        metric(metrics::ACQUISITIONS_TOTAL, false, &[GROUP, OUTCOME]),
        metric(metrics::LOSSES_TOTAL, false, &[GROUP, REASON]),
        metric(metrics::RENEWALS_TOTAL, false, &[]),
        metric(metrics::RENEWAL_FAILURES_TOTAL, false, &[]),
        metric(metrics::BACKGROUND_RELEASES_TOTAL, false, &[]),
        metric(metrics::HELD, false, &[GROUP]),
        metric(metrics::WAITING, false, &[GROUP]),
        metric(metrics::SUBSCRIBED_CHANNELS, false, &[]),
    ]
}

/// The labels a series of `series` carries, with the metric it belongs to; `None` if it is not
/// one of the runtime's series. A histogram is exported either as a Prometheus histogram
/// (`_bucket` with `le`, `_sum`, `_count`) or as a summary (the bare name with `quantile`,
/// `_sum`, `_count`), so both forms are accepted.
fn series_labels(series: &str, recorded: &[Metric]) -> Option<(&'static str, BTreeSet<String>)> {
    for m in recorded {
        let extra: &[&str] = if series == m.name {
            if m.histogram { &["quantile"] } else { &[] }
        } else if m.histogram && series == format!("{}_bucket", m.name) {
            &["le"]
        } else if m.histogram
            && (series == format!("{}_sum", m.name) || series == format!("{}_count", m.name))
        {
            &[]
        } else {
            continue;
        };
        let labels = m
            .labels
            .iter()
            .chain(extra)
            .chain(&SCRAPE_LABELS)
            .map(|l| l.to_string())
            .collect();
        return Some((m.name, labels));
    }
    None
}

/// A token of a PromQL expression, as far as this check needs one.
#[derive(Debug, Clone, PartialEq)]
enum Token {
    /// A name: a metric, a function, an aggregation or a keyword such as `by`.
    Ident(String),
    /// A selector's label matchers, `{a="x", b=~"y"}`: the label names.
    Matchers(Vec<String>),
    /// Any other character or number (parentheses, operators, commas, durations, strings).
    Other(char),
}

/// Splits a PromQL expression into tokens: names, label matcher blocks and the rest (string
/// literals, numbers and range selectors `[…]` are reduced to single `Other` tokens).
fn tokens(expr: &str) -> Vec<Token> {
    let mut out = Vec::new();
    let mut chars = expr.chars().peekable();
    while let Some(c) = chars.next() {
        if c.is_ascii_alphabetic() || c == '_' || c == ':' {
            let mut name = c.to_string();
            while let Some(&n) = chars.peek() {
                if n.is_ascii_alphanumeric() || n == '_' || n == ':' {
                    name.push(n);
                    chars.next();
                } else {
                    break;
                }
            }
            out.push(Token::Ident(name));
        } else if c.is_ascii_digit() || c == '.' {
            // A number (a quantile, a factor): its digits, dots and exponent are not a name.
            while chars
                .peek()
                .is_some_and(|n| n.is_ascii_alphanumeric() || *n == '.')
            {
                chars.next();
            }
            out.push(Token::Other('0'));
        } else if c == '"' {
            while let Some(n) = chars.next() {
                match n {
                    '\\' => {
                        chars.next();
                    }
                    '"' => break,
                    _ => {}
                }
            }
            out.push(Token::Other('"'));
        } else if c == '[' {
            // A range (`[5m]`, `[$__rate_interval]`): no names in it.
            for n in chars.by_ref() {
                if n == ']' {
                    break;
                }
            }
            out.push(Token::Other('['));
        } else if c == '{' {
            let mut block = String::new();
            let mut quoted = false;
            for n in chars.by_ref() {
                match n {
                    '"' => quoted = !quoted,
                    '}' if !quoted => break,
                    _ if quoted => continue,
                    _ => {}
                }
                block.push(n);
            }
            // Outside the quoted values: `name op "", name op ""`.
            let labels = block
                .split(',')
                .map(|m| {
                    m.trim()
                        .split(['=', '!', '~'])
                        .next()
                        .unwrap_or("")
                        .trim()
                        .to_owned()
                })
                .filter(|l| !l.is_empty())
                .collect();
            out.push(Token::Matchers(labels));
        } else if !c.is_whitespace() {
            out.push(Token::Other(c));
        }
    }
    out
}

/// The PromQL functions and aggregations the dashboard may call.
const FUNCTIONS: [&str; 18] = [
    "sum",
    "max",
    "min",
    "avg",
    "count",
    "topk",
    "bottomk",
    "rate",
    "irate",
    "increase",
    "delta",
    "deriv",
    "histogram_quantile",
    "clamp_min",
    "max_over_time",
    "min_over_time",
    "avg_over_time",
    "vector",
];

/// Keywords followed by a list of labels in parentheses.
const LABEL_LISTS: [&str; 6] = [
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
];

/// What one expression refers to: its series (each with the labels its selector filters by)
/// and the labels it groups or matches by.
#[derive(Debug, Default)]
struct Refs {
    series: Vec<(String, Vec<String>)>,
    grouping: Vec<String>,
}

/// The series and labels an expression refers to; `Err` for a name that is neither a function
/// nor a keyword nor a selector.
fn refs(expr: &str) -> Result<Refs, String> {
    let toks = tokens(expr);
    let mut refs = Refs::default();
    let mut i = 0;
    while i < toks.len() {
        if let Token::Ident(name) = &toks[i] {
            let next = toks.get(i + 1);
            if LABEL_LISTS.contains(&name.as_str()) {
                if next != Some(&Token::Other('(')) {
                    return Err(format!("`{name}` without a label list"));
                }
                i += 2;
                while let Some(tok) = toks.get(i) {
                    match tok {
                        Token::Ident(label) => refs.grouping.push(label.clone()),
                        Token::Other(')') => break,
                        Token::Other(',') => {}
                        other => return Err(format!("{other:?} in the labels of `{name}`")),
                    }
                    i += 1;
                }
            } else if FUNCTIONS.contains(&name.as_str()) {
                // A call, or an aggregation with its `by (…)` before its argument.
            } else if next == Some(&Token::Other('(')) {
                return Err(format!("unknown function `{name}`"));
            } else if name != "bool" && name != "offset" {
                let matchers = match next {
                    Some(Token::Matchers(labels)) => labels.clone(),
                    _ => Vec::new(),
                };
                refs.series.push((name.clone(), matchers));
            }
        } else if let Token::Matchers(_) = &toks[i]
            && !matches!(i.checked_sub(1).map(|j| &toks[j]), Some(Token::Ident(_)))
        {
            return Err("a selector without a metric name".to_owned());
        }
        i += 1;
    }
    Ok(refs)
}

/// Every query of the dashboard, with where it is: the panels' targets (also inside rows)
/// and the template variables' queries.
fn queries(dashboard: &Value) -> Vec<(String, String)> {
    fn panel_queries(panel: &Value, out: &mut Vec<(String, String)>) {
        let title = panel["title"].as_str().unwrap_or("?");
        for target in panel["targets"].as_array().into_iter().flatten() {
            let expr = target["expr"]
                .as_str()
                .unwrap_or_else(|| panic!("panel {title:?}: a target without an expr"));
            out.push((format!("panel {title:?}"), expr.to_owned()));
        }
        for inner in panel["panels"].as_array().into_iter().flatten() {
            panel_queries(inner, out);
        }
    }
    let mut out = Vec::new();
    for panel in dashboard["panels"].as_array().expect("a panels list") {
        panel_queries(panel, &mut out);
    }
    for var in dashboard["templating"]["list"]
        .as_array()
        .expect("templating")
    {
        if var["type"] == "query" {
            let query = var["query"]["query"]
                .as_str()
                .or(var["query"].as_str())
                .expect("a query variable's query");
            out.push((format!("variable {}", var["name"]), query.to_owned()));
        }
    }
    out
}

/// A template variable's `label_values(selector, label)`: the selector and the label.
fn label_values(query: &str) -> Option<(&str, &str)> {
    let args = query
        .trim()
        .strip_prefix("label_values(")?
        .strip_suffix(')')?;
    let (selector, label) = args.rsplit_once(',')?;
    Some((selector.trim(), label.trim()))
}

/// The problems of a dashboard: every query's names and labels checked against what the
/// runtime records, and every metric used somewhere.
fn problems(dashboard: &Value) -> Vec<String> {
    let recorded = recorded();
    let mut problems = Vec::new();
    let mut used = BTreeSet::new();
    let queries = queries(dashboard);
    assert!(queries.len() > 10, "too few queries: {queries:?}");
    for (place, query) in &queries {
        let (expr, listed) = match label_values(query) {
            Some((selector, label)) => (selector, Some(label)),
            None => (query.as_str(), None),
        };
        let refs = match refs(expr) {
            Ok(refs) => refs,
            Err(e) => {
                problems.push(format!("{place}: {e} in `{query}`"));
                continue;
            }
        };
        if refs.series.is_empty() {
            problems.push(format!("{place}: no metric in `{query}`"));
        }
        let mut grouping = refs.grouping.clone();
        grouping.extend(listed.map(str::to_owned));
        for (series, matchers) in &refs.series {
            let Some((metric, labels)) = series_labels(series, &recorded) else {
                problems.push(format!(
                    "{place}: `{series}` is not a series of lock_runtime::metrics in `{query}`"
                ));
                continue;
            };
            used.insert(metric);
            for label in matchers.iter().chain(&grouping) {
                if !labels.contains(label) {
                    problems.push(format!(
                        "{place}: `{series}` has no label `{label}` in `{query}`"
                    ));
                }
            }
        }
    }
    for m in &recorded {
        if !used.contains(m.name) {
            problems.push(format!("no query uses `{}`", m.name));
        }
    }
    problems
}

#[test]
fn every_query_names_a_recorded_metric_and_its_labels() {
    let dashboard: Value = serde_json::from_str(DASHBOARD).expect("the dashboard is JSON");
    let problems = problems(&dashboard);
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn a_misspelt_name_or_label_is_caught() {
    let dashboard: Value = serde_json::from_str(DASHBOARD).expect("the dashboard is JSON");
    let spoil = |from: &str, to: &str| -> Vec<String> {
        let text = serde_json::to_string(&dashboard).unwrap();
        assert!(text.contains(from), "{from} is not in the dashboard");
        problems(&serde_json::from_str(&text.replacen(from, to, 1)).unwrap())
    };
    // A misspelt metric, a suffix that only histograms have, a label the metric lacks, a
    // grouping by a label the metric lacks, a misspelt function.
    for (from, to, expected) in [
        (
            "lock_losses_total{",
            "lock_loses_total{",
            "`lock_loses_total` is not a series",
        ),
        (
            "lock_handover_seconds_count",
            "lock_handover_seconds_total",
            "`lock_handover_seconds_total` is not a series",
        ),
        (
            "lock_renewals_total{",
            "lock_renewals_total_count{",
            "`lock_renewals_total_count` is not a series",
        ),
        (
            "lock_held{job=~\\\"$job\\\", group",
            "lock_held{job=~\\\"$job\\\", reason",
            "`lock_held` has no label `reason`",
        ),
        (
            "sum by (instance) (rate(lock_renewal_failures_total",
            "sum by (group) (rate(lock_renewal_failures_total",
            "`lock_renewal_failures_total` has no label `group`",
        ),
        (
            "histogram_quantile(",
            "histogram_quantil(",
            "unknown function",
        ),
    ] {
        let problems = spoil(from, to);
        assert!(
            problems.iter().any(|p| p.contains(expected)),
            "{from} -> {to}: expected {expected:?}, got {problems:?}"
        );
    }
}

#[test]
fn the_dashboard_has_its_variables_and_every_panel_their_datasource() {
    let dashboard: Value = serde_json::from_str(DASHBOARD).expect("the dashboard is JSON");
    let vars = dashboard["templating"]["list"].as_array().unwrap();
    let var = |name: &str| {
        vars.iter()
            .find(|v| v["name"] == name)
            .unwrap_or_else(|| panic!("no variable {name}"))
    };
    assert_eq!(var("datasource")["type"], "datasource");
    assert_eq!(var("datasource")["query"], "prometheus");
    assert_eq!(var("group")["type"], "query");
    assert_eq!(var("group")["includeAll"], true);
    for panel in dashboard["panels"].as_array().unwrap() {
        if panel["type"] == "row" {
            continue;
        }
        assert_eq!(
            panel["datasource"]["uid"], "${datasource}",
            "panel {}",
            panel["title"]
        );
        for target in panel["targets"].as_array().unwrap() {
            assert_eq!(target["datasource"]["uid"], "${datasource}");
        }
    }
}
