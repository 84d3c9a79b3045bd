//! The fenced blocks of a Markdown page and the command lines in them.
//!
//! Two kinds of block hold commands: ```console (a `$ ` or `# ` prompt
//! before each command, the output after it, as a terminal shows them) and
//! ```sh (one command per line, nothing else). Every other block is output,
//! a file or a drawing, and holds none: a prompt in one is a mistake, since
//! nothing would check that command.

/// One fenced block.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Block {
    /// The word after the opening fence (`console`, `sh`, `json`, …), or "".
    pub info: String,
    /// The block's lines without the fence's indentation, each with its
    /// 1-based line number in the page.
    pub lines: Vec<(usize, String)>,
}

/// A command as a block shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommandLine {
    /// Line of the page where the command starts.
    pub line: usize,
    /// The command without its prompt, lines continued with `\` joined.
    pub text: String,
    /// The first line of output shown after it, if any.
    pub output: Option<String>,
}

/// Which blocks hold commands, and how.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `$ ` or `# ` before each command, output lines between them.
    Console,
    /// Every line a command (blank lines and `#` comments aside).
    Script,
    /// No commands: output, a file's contents, a drawing.
    Other,
}

impl Block {
    pub fn kind(&self) -> Kind {
        match self.info.as_str() {
            "console" => Kind::Console,
            "sh" | "bash" | "shell" => Kind::Script,
            _ => Kind::Other,
        }
    }

    /// The command lines of a ```console or ```sh block (none for others).
    pub fn commands(&self) -> Vec<CommandLine> {
        match self.kind() {
            Kind::Console => console_commands(&self.lines),
            Kind::Script => script_commands(&self.lines),
            Kind::Other => Vec::new(),
        }
    }

    /// Lines of a block that holds no commands which look like one (a `$ `
    /// prompt): nothing would check them.
    pub fn stray_prompts(&self) -> Vec<usize> {
        if self.kind() != Kind::Other {
            return Vec::new();
        }
        self.lines
            .iter()
            .filter(|(_, text)| text.starts_with("$ "))
            .map(|(number, _)| *number)
            .collect()
    }
}

/// Every fenced block of `page`. A block left open runs to the end.
pub fn blocks(page: &str) -> Vec<Block> {
    let mut found = Vec::new();
    let mut open: Option<(String, Block)> = None;
    for (index, raw) in page.lines().enumerate() {
        let number = index + 1;
        let trimmed = raw.trim_start();
        let indent = &raw[..raw.len() - trimmed.len()];
        match open.take() {
            None => {
                if let Some(info) = trimmed.strip_prefix("```") {
                    let info = info.split_whitespace().next().unwrap_or("").to_owned();
                    let block = Block {
                        info,
                        lines: Vec::new(),
                    };
                    open = Some((indent.to_owned(), block));
                }
            }
            Some((fence_indent, mut block)) => {
                if trimmed.trim_end() == "```" {
                    found.push(block);
                } else {
                    let text = raw.strip_prefix(fence_indent.as_str()).unwrap_or(raw);
                    block.lines.push((number, text.to_owned()));
                    open = Some((fence_indent, block));
                }
            }
        }
    }
    found.extend(open.map(|(_, block)| block));
    found
}

fn console_commands(lines: &[(usize, String)]) -> Vec<CommandLine> {
    let mut commands: Vec<CommandLine> = Vec::new();
    let mut rest = lines.iter();
    while let Some((number, text)) = rest.next() {
        let Some(command) = text.strip_prefix("$ ").or_else(|| text.strip_prefix("# ")) else {
            // Output: the first line after a command is what it printed first.
            if let Some(last) = commands.last_mut() {
                last.output.get_or_insert_with(|| text.clone());
            }
            continue;
        };
        commands.push(CommandLine {
            line: *number,
            text: continued(command, &mut rest),
            output: None,
        });
    }
    commands
}

fn script_commands(lines: &[(usize, String)]) -> Vec<CommandLine> {
    let mut commands = Vec::new();
    let mut rest = lines.iter();
    while let Some((number, text)) = rest.next() {
        let text = text.trim();
        if text.is_empty() || text.starts_with('#') {
            continue;
        }
        commands.push(CommandLine {
            line: *number,
            text: continued(text, &mut rest),
            output: None,
        });
    }
    commands
}

/// `first` and the lines it continues onto with a trailing `\`, joined.
fn continued<'a>(first: &str, rest: &mut impl Iterator<Item = &'a (usize, String)>) -> String {
    let mut text = first.trim_end().to_owned();
    while let Some(head) = text.strip_suffix('\\') {
        text = head.to_owned();
        match rest.next() {
            Some((_, next)) => text.push_str(next.trim_end()),
            None => break,
        }
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    const PAGE: &str = "\
Text.

```console
$ srap hash --key 00 \\
    --src 1.1.1.1:1 --dst 2.2.2.2:2
0x1234
more output
# srap status --once
srap: error: no control socket
```

  ```sh
  # a comment
  cargo xtask lab

  cargo xtask test   # the other one
  ```

```
$ not checked
```
";

    #[test]
    fn finds_every_block_with_its_kind() {
        let found = blocks(PAGE);
        let kinds: Vec<Kind> = found.iter().map(Block::kind).collect();
        assert_eq!(kinds, [Kind::Console, Kind::Script, Kind::Other]);
        assert_eq!(found[1].lines[1], (14, "cargo xtask lab".to_owned()));
    }

    #[test]
    fn console_commands_are_joined_and_keep_their_first_output_line() {
        let commands = blocks(PAGE)[0].commands();
        assert_eq!(
            commands,
            [
                CommandLine {
                    line: 4,
                    text: "srap hash --key 00     --src 1.1.1.1:1 --dst 2.2.2.2:2".to_owned(),
                    output: Some("0x1234".to_owned()),
                },
                CommandLine {
                    line: 8,
                    text: "srap status --once".to_owned(),
                    output: Some("srap: error: no control socket".to_owned()),
                },
            ]
        );
    }

    #[test]
    fn script_lines_are_commands_and_comments_are_not() {
        let texts: Vec<String> = blocks(PAGE)[1]
            .commands()
            .into_iter()
            .map(|c| c.text)
            .collect();
        assert_eq!(
            texts,
            ["cargo xtask lab", "cargo xtask test   # the other one"]
        );
    }

    #[test]
    fn a_prompt_in_an_output_block_is_reported() {
        let found = blocks(PAGE);
        assert_eq!(found[2].stray_prompts(), [20]);
        assert!(found[0].stray_prompts().is_empty());
    }
}
