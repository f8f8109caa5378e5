//! `rigrun report`: the HTML file opens in a real headless Chromium with no error of any kind
//! (its Content-Security-Policy forbids loading anything, so a page that tried would say so),
//! the charts are in the DOM, and a screenshot is kept in target/test-artifacts/.
//! Chromium is required: `apt-get install -y chromium` (.ci/run installs it).

use crate::chromium::{artifact, Browser};
use crate::reporting::{rigrun_ok, run, setup, PLAYBOOK};
use serde_json::json;

/// What the checks read from the loaded page.
const DOM_CHECK: &str = r#"({
  charts: [...document.querySelectorAll('svg.chart')].map(s => s.dataset.chart),
  series: [...document.querySelectorAll('svg.chart[data-chart=throughput] g.series')].map(g => g.dataset.series),
  markers: document.querySelectorAll('svg.chart .marker').length,
  gaps: [...document.querySelectorAll('svg.chart[data-chart=throughput] path.gap title')].map(t => t.textContent),
  legend: [...document.querySelectorAll('svg.chart[data-chart=throughput] g.key text')].map(t => t.textContent),
  leftOut: [...document.querySelectorAll('p.left-out')].map(p => p.textContent),
  hosts: [...document.querySelectorAll('.host')].map(h => h.dataset.host),
  chartWidth: document.querySelector('svg.chart').getBoundingClientRect().width,
  invalid: document.querySelectorAll('td.invalid').length,
  missed: document.querySelectorAll('td.missed').length,
  text: document.body.innerText,
})"#;

/// In every chart, as Chromium lays it out (the boxes of the texts drawn in its fonts): the
/// legend's samples and texts apart from each other and from the axes' texts, and inside the
/// chart; point labels apart from each other, from every marker and × and from the limits'
/// labels; those apart from every marker. Each overlap found, named.
pub const CHART_OVERLAPS: &str = r#"(() => {
  const found = [];
  const box = el => { const b = el.getBBox(); return { x0: b.x, y0: b.y, x1: b.x + b.width, y1: b.y + b.height }; };
  const overlap = (a, b) => a.x0 < b.x1 - 0.5 && b.x0 < a.x1 - 0.5 && a.y0 < b.y1 - 0.5 && b.y0 < a.y1 - 0.5;
  const named = el => `${el.tagName}.${el.getAttribute('class') || ''} "${el.textContent.slice(0, 40)}"`;
  const apart = (kind, as, bs, same) => as.forEach((a, i) => bs.forEach((b, j) => {
    if (same ? i < j && a.group !== b.group : true) {
      if (overlap(a.box, b.box)) found.push(`${kind}: ${named(a.el)} overlaps ${named(b.el)}`);
    }
  }));
  const items = (svg, selector, group) => [...svg.querySelectorAll(selector)]
    .map(el => ({ el, box: box(el), group: group ? group(el) : el }));
  let charts = 0, labels = 0;
  for (const svg of document.querySelectorAll('svg.chart')) {
    charts++;
    const kind = svg.dataset.chart;
    const legend = items(svg, 'g.key > g > *:not(title)', el => el.parentNode);
    const axisTexts = items(svg, 'text.tick, text.label, text.title');
    apart(kind + ' legend', legend, legend, true);
    const legendTexts = items(svg, 'text.legend');
    apart(kind + ' legend texts', legendTexts, legendTexts, true);
    apart(kind + ' legend/axis', legend, axisTexts, false);
    const view = svg.viewBox.baseVal;
    for (const item of legend) {
      if (item.box.x0 < 0 || item.box.x1 > view.width || item.box.y1 > view.height) found.push(`${kind}: ${named(item.el)} outside the chart`);
    }
    const pointLabels = items(svg, 'text.point');
    const limitLabels = items(svg, 'g.limit text');
    const marks = items(svg, '.marker, path.gap');
    labels += pointLabels.length + limitLabels.length;
    const texts = pointLabels.concat(limitLabels);
    apart(kind + ' labels', texts, texts, true);
    apart(kind + ' label/point', texts, marks, false);
  }
  return { charts, labels, found };
})()"#;

#[test]
fn the_report_loads_cleanly_in_chromium_with_its_charts() {
    let dir = setup(PLAYBOOK);
    let (run_dir, out) = run(dir.path(), &[]);
    assert!(out.status.success(), "{:?}", crate::common::text(&out));
    let html_path = dir.path().join("report.html");
    rigrun_ok(
        &[
            "report",
            run_dir.to_str().unwrap(),
            "--out",
            html_path.to_str().unwrap(),
        ],
        0,
    );
    let html = std::fs::read_to_string(&html_path).unwrap();
    assert!(
        !html.contains("<script") && !html.contains("src="),
        "the report must not load anything"
    );
    let external: Vec<&str> = html.matches("http").collect();
    assert_eq!(
        external.len(),
        html.matches("http://www.w3.org/2000/svg").count() + html.matches("http-equiv").count(),
        "no links or resources outside the file"
    );

    let mut browser = Browser::launch();
    let shot = artifact("report-local-sweep.png");
    let page = browser.check_page(&html_path, DOM_CHECK, &shot);
    assert_no_overlap(&mut browser, &html_path, "report-local-sweep-overlaps.png");
    assert_eq!(page.errors, Vec::<String>::new(), "the page logged errors");
    let dom = &page.evaluated;
    let charts = strings(&dom["charts"]);
    for kind in ["throughput", "ttft", "tradeoff", "prefill"] {
        assert!(charts.contains(&kind), "no {kind} chart in {charts:?}");
    }
    assert!(
        dom["series"].as_array().unwrap().contains(&json!("fast")),
        "{dom}"
    );
    assert!(dom["markers"].as_u64().unwrap() >= 10, "{dom}");
    assert_eq!(dom["hosts"], json!(["fast", "slow"]));
    assert!(
        dom["chartWidth"].as_f64().unwrap() > 300.0,
        "charts are laid out: {dom}"
    );
    assert!(
        dom["invalid"].as_u64().unwrap() >= 1,
        "the invalid record is marked: {dom}"
    );
    assert!(
        dom["missed"].as_u64().unwrap() >= 1,
        "the missed reference is marked: {dom}"
    );
    // The points not measured are marked, each with why: slow's C=64 skipped, its C=4 invalid.
    let gaps = strings(&dom["gaps"]);
    assert!(
        gaps.iter()
            .any(|g| g.starts_with("slow: C=64 skipped: concurrency = 64 > cap = 16")),
        "{gaps:?}"
    );
    assert!(
        gaps.iter()
            .any(|g| g.starts_with("slow: C=4 invalid: 2 of 12 requests failed")),
        "{gaps:?}"
    );
    assert_eq!(dom["legend"], json!(["fast", "slow", "not measured"]), "{dom}");
    // Both steps are sweeps: the long-context one over input lengths has its prefill chart and
    // no sentence about the charts against concurrency it is not meant for.
    assert_eq!(dom["leftOut"], json!([]), "{dom}");
    let text = dom["text"].as_str().unwrap();
    for advice in ["no host has two concurrency levels", "one input length only"] {
        assert!(!text.contains(advice), "{text}");
    }
    assert!(
        text.contains("scaling of output_throughput with concurrency"),
        "{text}"
    );
    assert!(text.contains("capacity limit: C=64 skipped"), "{text}");
    assert!(text.contains("invalid: 2 of 12 requests failed"), "{text}");
    assert!(
        std::fs::metadata(&shot).unwrap().len() > 10_000,
        "{}",
        shot.display()
    );
    eprintln!("screenshot: {}", shot.display());
}

/// Every chart of the page at `html` has labels and no overlap (see [`CHART_OVERLAPS`]).
pub fn assert_no_overlap(browser: &mut Browser, html: &std::path::Path, shot: &str) {
    let page = browser.check_page(html, CHART_OVERLAPS, &artifact(shot));
    assert_eq!(page.errors, Vec::<String>::new());
    let checked = &page.evaluated;
    assert!(checked["charts"].as_u64().unwrap() >= 3, "{checked}");
    assert!(
        checked["labels"].as_u64().unwrap() >= 3,
        "labels drawn: {checked}"
    );
    assert_eq!(checked["found"], json!([]), "overlaps in {}", html.display());
}

/// The texts of a JSON array of them.
fn strings(array: &serde_json::Value) -> Vec<&str> {
    let texts = array.as_array().unwrap().iter();
    texts.filter_map(|t| t.as_str()).collect()
}

/// The checks above would pass on a broken error collector; this page must trip all of them.
#[test]
fn the_browser_check_sees_scripts_console_errors_and_blocked_loads() {
    let dir = tempfile::tempdir().unwrap();
    let page = dir.path().join("bad.html");
    std::fs::write(
        &page,
        r#"<!DOCTYPE html><html><head><meta http-equiv="Content-Security-Policy" content="default-src 'none'; script-src 'unsafe-inline'"></head>
        <body><img src="https://cdn.example.invalid/x.png"><script>console.error("from the page"); throw new Error("boom");</script></body></html>"#,
    )
    .unwrap();
    let mut browser = Browser::launch();
    let check = browser.check_page(&page, "document.title", &dir.path().join("bad.png"));
    let all = check.errors.join("\n");
    assert!(all.contains("boom"), "{all}");
    assert!(all.contains("from the page"), "{all}");
    assert!(
        all.contains("cdn.example.invalid"),
        "the blocked load is reported: {all}"
    );
}

/// The report of two runs of `PLAYBOOK`, the second with both hosts at speed 150 (fast loses
/// 25%, slow gains 50%), made with `extra` arguments; in `dir`.
fn report_across_two_runs(dir: &std::path::Path, extra: &[&str]) -> std::path::PathBuf {
    let (first, _) = run(dir, &[]);
    let (second, out) = run(dir, &["-e", "speed=150"]);
    assert!(out.status.success(), "{:?}", crate::common::text(&out));
    let html_path = dir.join("across.html");
    let (first, second) = (first.to_str().unwrap(), second.to_str().unwrap());
    let args = [
        &["report", first, second, "--out", html_path.to_str().unwrap()],
        extra,
    ]
    .concat();
    rigrun_ok(&args, 0);
    html_path
}

#[test]
fn a_report_across_runs_marks_changes_beyond_the_tolerance() {
    let dir = setup(PLAYBOOK);
    let html_path = report_across_two_runs(dir.path(), &["--tolerance", "10%"]);
    let mut browser = Browser::launch();
    assert_no_overlap(&mut browser, &html_path, "report-across-runs-overlaps.png");
    let page = browser.check_page(
        &html_path,
        r#"({
          regressions: [...document.querySelectorAll('td.regression')].map(td => td.textContent),
          improvements: [...document.querySelectorAll('td.improvement')].map(td => td.textContent),
          series: [...document.querySelectorAll('svg.chart[data-chart=throughput] g.series')].map(g => g.dataset.series),
          runs: document.querySelectorAll('#hosts h3').length,
        })"#,
        &artifact("report-across-runs.png"),
    );
    assert_eq!(page.errors, Vec::<String>::new());
    let dom = &page.evaluated;
    // Each judged change points to its note (one measurement a side: the tolerance alone).
    assert!(
        dom["regressions"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c.as_str().is_some_and(|t| t.starts_with("-25.0% regression ["))),
        "{dom}"
    );
    // Each judged change points to its note (one measurement a side: the tolerance alone).
    assert!(
        dom["improvements"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c.as_str().is_some_and(|t| t.starts_with("+50.0% improvement ["))),
        "{dom}"
    );
    assert_eq!(
        dom["series"].as_array().unwrap().len(),
        4,
        "a line per host and run: {dom}"
    );
    assert_eq!(dom["runs"], 2);
}

/// Per table, whether its right edge lies beyond what its container shows without scrolling
/// (the container's edge, or the page's), unless the container scrolls sideways; tables in a
/// closed `<details>` are not laid out and not counted.
const TABLES_FIT: &str = r#"(() => {
  const page = document.documentElement.clientWidth;
  const scrolls = el => ['auto', 'scroll'].includes(getComputedStyle(el).overflowX)
    && el.scrollWidth > el.clientWidth;
  const cut = [];
  let scrolling = 0, tables = 0;
  for (const table of document.querySelectorAll('table')) {
    if (!table.getClientRects().length) continue;
    tables++;
    const box = table.parentElement;
    const edge = Math.min(box.getBoundingClientRect().right, page);
    const right = table.getBoundingClientRect().right;
    const name = (table.closest('section')?.id || '') + ': ' + table.querySelector('tr').textContent.slice(0, 60);
    if (scrolls(box)) {
      scrolling++;
      if (box.getBoundingClientRect().right > page + 0.5) cut.push(name + ' (its scrolling box passes the page)');
    } else if (right > edge + 0.5) {
      cut.push(`${name}: right edge ${right} beyond ${edge}`);
    }
  }
  return { cut, scrolling, tables, page, pageScrollWidth: document.documentElement.scrollWidth };
})()"#;

#[test]
fn a_table_wider_than_the_page_scrolls_in_its_own_box_and_none_is_cut() {
    let dir = setup(PLAYBOOK);
    let html_path = report_across_two_runs(dir.path(), &[]);
    // The window of the other tests, and a narrow one in which the across-runs table is wider
    // than the page.
    for (width, shot) in [
        (None, "report-tables-1280.png"),
        (Some(700), "report-tables-700.png"),
    ] {
        let mut browser = Browser::launch();
        if let Some(width) = width {
            browser.set_viewport_width(width);
        }
        let page = browser.check_page(&html_path, TABLES_FIT, &artifact(shot));
        assert_eq!(page.errors, Vec::<String>::new());
        let dom = &page.evaluated;
        assert!(dom["tables"].as_u64().unwrap() >= 4, "{dom}");
        assert_eq!(dom["cut"], json!([]), "tables cut at the right edge: {dom}");
        assert!(
            dom["pageScrollWidth"].as_f64() <= dom["page"].as_f64(),
            "the page itself does not scroll sideways: {dom}"
        );
        if width.is_some() {
            assert!(
                dom["scrolling"].as_u64().unwrap() >= 1,
                "a wide table scrolls in its box: {dom}"
            );
        }
    }
}
