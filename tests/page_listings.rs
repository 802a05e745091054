//! The demo page's program listings (web/programs.js) against the code they show: a plain test
//! (no browser, no wasm build), so the default test run keeps them in sync with web/src.

/// Every Rust listing of web/programs.js is the real program: each of its lines (trimmed;
/// `// …` marks left-out lines) appears in web/src's source, and every demo has one.
#[test]
fn listings_match_the_source() {
    let programs = include_str!("../web/programs.js");
    let index = include_str!("../web/index.html");
    let cards_js = include_str!("../web/cards.js");
    let source = [
        include_str!("../web/src/advanced.rs"),
        include_str!("../web/src/basics.rs"),
        include_str!("../web/src/cards.rs"),
        include_str!("../web/src/matmul.rs"),
        include_str!("../web/src/session.rs"),
        include_str!("../web/src/training.rs"),
    ]
    .concat();
    let lines: std::collections::HashSet<&str> = source.lines().map(str::trim).collect();
    let mut names = Vec::new();
    // Each entry: `  name: {` then `file: '…'`, `rust: String.raw` and the text up to the next backtick.
    for chunk in programs.split("rust: String.raw`").skip(1) {
        let body = &chunk[..chunk.find('`').expect("a closed listing")];
        let mut checked = 0;
        for l in body.lines().map(str::trim) {
            if l.is_empty() || l == "// …" {
                continue;
            }
            assert!(lines.contains(l), "a listing line is not in web/src: {l:?}");
            checked += 1;
        }
        assert!(checked >= 5, "a listing of {checked} lines: {body}");
    }
    for l in programs.lines() {
        let name = l.strip_prefix("  ").and_then(|r| r.strip_suffix(": {"));
        if let Some(name) = name.filter(|n| n.chars().all(|c| c.is_ascii_lowercase() || c == '_')) {
            names.push(name.to_string());
        }
    }
    assert!(names.len() >= 15, "{names:?}");
    // Every listing is shown somewhere: a placeholder in index.html or a card of cards.js.
    for n in &names {
        let placeholder = format!("data-programs=\"{n}\"");
        let card = format!("dataset.programs = '{n}'");
        assert!(
            index.contains(&placeholder) || cards_js.contains(&card),
            "no place shows the listing {n}"
        );
    }
}
