//! Error text for an operator: one line in the product's words. Libraries (zenoh among them)
//! append the source location of the error (` at /…/orchestrator.rs:447.`); that is for a
//! developer, shown with `-v` only.

/// `msg` as one line without library source locations: newlines become `; `, every
/// ` at <path>.rs:<line>[.]` is removed, and runs of spaces collapse.
pub fn operator_line(msg: &str) -> String {
    let one = msg
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join("; ");
    let out = strip_locations(&one);
    let mut squeezed = String::with_capacity(out.len());
    let mut space = false;
    for c in out.chars() {
        if c == ' ' {
            if !space {
                squeezed.push(c);
            }
            space = true;
        } else {
            squeezed.push(c);
            space = false;
        }
    }
    squeezed.trim().to_string()
}

/// Removes every ` at <path>.rs:<line>[:<col>][.]`: each `.rs:<digits>` back to the ` at `
/// before it (a path may hold spaces, e.g. an abbreviated registry path).
fn strip_locations(s: &str) -> String {
    let mut out = s.to_string();
    let mut from = 0;
    while let Some(rel) = out[from..].find(".rs:") {
        let i = from + rel;
        let digits_at = i + 4;
        let tail = &out[digits_at..];
        let n = tail
            .chars()
            .take_while(|c| c.is_ascii_digit() || *c == ':')
            .count();
        if n == 0 || !tail.starts_with(|c: char| c.is_ascii_digit()) {
            from = digits_at;
            continue;
        }
        let mut end = digits_at + n;
        if out[end..].starts_with('.') {
            end += 1;
        }
        match out[..i].rfind(" at ") {
            Some(at) => {
                out.replace_range(at..end, "");
                from = at;
            }
            None => from = end,
        }
    }
    out
}

/// The message for a zenoh session that could not be opened towards `router`.
pub fn unreachable_router(router: &str, err: &str) -> String {
    if err.contains("Unable to connect") {
        format!(
            "cannot reach the cell at {router}: no zenoh router answers there (start the cell \
             with `cell up`, or give its address with --connect or --set cell.router=…)"
        )
    } else {
        format!("cannot reach the cell at {router}: {}", operator_line(err))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strips_zenohs_source_location() {
        let zenoh = "Unable to connect to any of [Single(tcp/127.0.0.1:38863)]!  at \
                     <cargo registry>/zenoh-1.10.2/src/net/runtime/orchestrator.rs:447.";
        // The registry path holds a space: the location starts at the last ` at `.
        let line = operator_line(&format!("cell: cannot reach the cell: {zenoh}"));
        assert!(!line.contains(".rs:"), "{line}");
        assert!(!line.contains("orchestrator"), "{line}");
        let plain = "Unable to connect to any of [x]!  at /home/u/.cargo/registry/src/zenoh-1.10.2/src/net/runtime/orchestrator.rs:447.";
        assert_eq!(operator_line(plain), "Unable to connect to any of [x]!");
    }

    #[test]
    fn keeps_ordinary_words_and_joins_lines() {
        assert_eq!(
            operator_line("contact force 50.4 N at the tool\n  caused by: limit"),
            "contact force 50.4 N at the tool; caused by: limit"
        );
        assert_eq!(
            operator_line("look at src/main.rs please"),
            "look at src/main.rs please"
        );
    }

    #[test]
    fn router_message_names_the_cause() {
        let m = unreachable_router(
            "tcp/127.0.0.1:7447",
            "Unable to connect to any of [..]! at /x/y.rs:1.",
        );
        assert!(m.contains("no zenoh router answers"), "{m}");
        assert!(!m.contains(".rs:"), "{m}");
    }
}
