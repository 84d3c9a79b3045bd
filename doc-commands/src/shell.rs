//! A documented command line as the shell would split it.
//!
//! Only what the documentation uses: words split on blanks, `'…'`, `"…"`
//! and `\` quoting, a `#` comment, and the operators that end a simple
//! command (`|`, `||`, `&&`, `;`, `&`, redirections). The first simple
//! command is kept (what follows a pipe or a list is `grep`, `head`,
//! `echo`: not SRAP's), then what only says where or as whom it runs is
//! taken off its front: `VAR=value`, `env`, `sudo`, `nsenter --net=…`,
//! `ip netns exec NS`.

/// The words of the first simple command of `line`, its wrappers removed.
pub fn first_command(line: &str) -> Result<Vec<String>, String> {
    let mut words = split(line)?;
    unwrap(&mut words);
    Ok(words)
}

/// Words up to the first operator, comment or end of line.
fn split(line: &str) -> Result<Vec<String>, String> {
    let mut words = Vec::new();
    let mut word = String::new();
    // Whether `word` holds a word, even an empty quoted one (`''`).
    let mut started = false;
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            ' ' | '\t' => {
                if started {
                    words.push(std::mem::take(&mut word));
                    started = false;
                }
            }
            '#' if !started => break,
            '|' | ';' | '&' => break,
            '<' | '>' => {
                // `2>file`, `2>&1`: the digits name a descriptor, not a word.
                if started && word.chars().all(|d| d.is_ascii_digit()) {
                    started = false;
                }
                break;
            }
            '\'' => {
                started = true;
                loop {
                    match chars.next() {
                        Some('\'') => break,
                        Some(q) => word.push(q),
                        None => return Err(format!("unterminated ' in `{line}`")),
                    }
                }
            }
            '"' => {
                started = true;
                loop {
                    match chars.next() {
                        Some('"') => break,
                        Some('\\') => match chars.next() {
                            Some(q @ ('"' | '\\' | '$' | '`')) => word.push(q),
                            Some(q) => {
                                word.push('\\');
                                word.push(q);
                            }
                            None => return Err(format!("unterminated \" in `{line}`")),
                        },
                        Some(q) => word.push(q),
                        None => return Err(format!("unterminated \" in `{line}`")),
                    }
                }
            }
            '\\' => {
                started = true;
                word.extend(chars.next());
            }
            _ => {
                started = true;
                word.push(c);
            }
        }
    }
    if started {
        words.push(word);
    }
    Ok(words)
}

/// Takes off the front of `words` what only sets where or as whom the
/// command runs, until the command itself comes first.
fn unwrap(words: &mut Vec<String>) {
    loop {
        let taken = match words.first().map(String::as_str) {
            Some(word) if is_assignment(word) => 1,
            Some("env") => 1,
            Some("sudo") => 1 + options(&words[1..], &["-u", "--user", "-g", "--group"]),
            Some("nsenter") => 1 + options(&words[1..], &["-t", "--target"]),
            Some("ip") if words.get(1..3) == Some(&["netns".into(), "exec".into()]) => 4,
            _ => return,
        };
        words.drain(..taken.min(words.len()));
    }
}

/// How many of `words` are options (`-x`, `--name=value`), counting the
/// value after each of `with_value`.
fn options(words: &[String], with_value: &[&str]) -> usize {
    let mut count = 0;
    while let Some(word) = words.get(count) {
        if !word.starts_with('-') {
            break;
        }
        count += if with_value.contains(&word.as_str()) {
            2
        } else {
            1
        };
    }
    count.min(words.len())
}

/// `NAME=value`, as the shell reads an assignment before a command.
fn is_assignment(word: &str) -> bool {
    let Some((name, _)) = word.split_once('=') else {
        return false;
    };
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(line: &str) -> Vec<String> {
        first_command(line).unwrap()
    }

    #[test]
    fn quotes_and_escapes_follow_the_shell() {
        assert_eq!(
            words(r#"srap hash --src '[3ffe::7]:2794' --workload "iperf3 -c {server}" a\ b ''"#),
            [
                "srap",
                "hash",
                "--src",
                "[3ffe::7]:2794",
                "--workload",
                "iperf3 -c {server}",
                "a b",
                ""
            ]
        );
        assert_eq!(words(r#"echo "a \"b\" \x""#), ["echo", r#"a "b" \x"#]);
    }

    #[test]
    fn the_first_simple_command_ends_at_an_operator_or_a_comment() {
        for line in [
            "srap status --once | grep peers",
            "srap status --once || true",
            "srap status --once && echo ok",
            "srap status --once; echo \"exit $?\"",
            "srap status --once > out.txt",
            "srap status --once 2>&1",
            "srap status --once &",
            "srap status --once   # the receiver's view",
        ] {
            assert_eq!(words(line), ["srap", "status", "--once"], "{line}");
        }
        assert_eq!(
            words("srap hash --key a#b"),
            ["srap", "hash", "--key", "a#b"]
        );
    }

    #[test]
    fn wrappers_that_only_say_where_it_runs_are_removed() {
        for line in [
            "nsenter --net=/run/netns/srapd-s srap-agent detach",
            "sudo -E srap-agent detach",
            "sudo -u root srap-agent detach",
            "ip netns exec srapd-s srap-agent detach",
            "RUST_LOG=debug srap-agent detach",
            "env RUST_LOG=debug sudo nsenter -t 42 -n srap-agent detach",
        ] {
            assert_eq!(words(line), ["srap-agent", "detach"], "{line}");
        }
        assert_eq!(words("$EDITOR /etc/srap/receiver.conf")[0], "$EDITOR");
    }

    #[test]
    fn an_unterminated_quote_is_an_error() {
        assert!(first_command("srap hash --src '1.1.1.1").is_err());
        assert!(first_command("srap hash --src \"1.1.1.1").is_err());
    }
}
