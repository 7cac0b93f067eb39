//! The layout kit every text block is written through: [`Out`] collects
//! lines and keeps each within the width, wrapping prose with a hanging
//! indent; [`stdout_width`] says how wide stdout is.

use unicode_width::UnicodeWidthStr;

/// Width used when the caller has no terminal to measure.
pub const DEFAULT_WIDTH: u16 = 80;
/// Below this the layout cannot be kept; narrower requests render at this width.
const MIN_WIDTH: usize = 40;

/// Width to render a report for stdout: the terminal's, or [`DEFAULT_WIDTH`]
/// when stdout is a pipe or file (then lines stay readable in an editor).
pub fn stdout_width() -> u16 {
    use std::io::IsTerminal;
    if !std::io::stdout().is_terminal() {
        return DEFAULT_WIDTH;
    }
    match ratatui::crossterm::terminal::size() {
        Ok((columns, _)) if columns > 0 => columns,
        _ => DEFAULT_WIDTH,
    }
}

/// Collects lines, keeping each within the width.
pub(super) struct Out {
    width: usize,
    text: String,
}

impl Out {
    pub(super) fn new(width: u16) -> Self {
        Out {
            width: usize::from(width).max(MIN_WIDTH),
            text: String::new(),
        }
    }

    pub(super) fn blank(&mut self) {
        self.text.push('\n');
    }

    /// A structured line; wrapped with a hanging indent only if it is too long.
    pub(super) fn line(&mut self, line: &str) {
        if line.width() <= self.width {
            self.text.push_str(line);
            self.text.push('\n');
            return;
        }
        let body = line.trim_start();
        let indent = &line[..line.len() - body.len()];
        self.wrapped(indent, &format!("{indent}  "), body);
    }

    /// Prose after `first`, continued on lines starting with `rest`.
    pub(super) fn wrapped(&mut self, first: &str, rest: &str, prose: &str) {
        for line in wrap(prose, first, rest, self.width) {
            self.text.push_str(&line);
            self.text.push('\n');
        }
    }

    /// The width lines are kept within.
    pub(super) fn width(&self) -> usize {
        self.width
    }

    pub(super) fn finish(self) -> String {
        self.text
    }
}

/// Prose after `first`, continued on lines starting with `rest`, each line
/// within `width` (for listings written without an [`Out`]).
pub fn wrapped_text(first: &str, rest: &str, prose: &str, width: u16) -> String {
    let mut out = Out::new(width);
    out.wrapped(first, rest, prose);
    out.finish()
}

/// Greedy word wrap; words longer than a line are cut.
fn wrap(prose: &str, first: &str, rest: &str, width: usize) -> Vec<String> {
    let mut lines = Vec::new();
    let mut current = first.to_string();
    let mut has_word = false;
    for word in prose.split_whitespace() {
        let needed = if has_word { 1 } else { 0 } + word.width();
        if has_word && current.width() + needed > width {
            lines.push(std::mem::replace(&mut current, rest.to_string()));
            has_word = false;
        }
        if has_word {
            current.push(' ');
        }
        // A single word wider than the line: cut it at the edge.
        let mut remaining = word;
        while current.width() + remaining.width() > width && !remaining.is_empty() {
            let room = width.saturating_sub(current.width());
            let cut = cut_at_width(remaining, room.max(1));
            if cut == 0 || (room == 0 && has_word) {
                lines.push(std::mem::replace(&mut current, rest.to_string()));
                has_word = false;
                continue;
            }
            current.push_str(&remaining[..cut]);
            lines.push(std::mem::replace(&mut current, rest.to_string()));
            remaining = &remaining[cut..];
        }
        current.push_str(remaining);
        has_word = true;
    }
    if has_word || lines.is_empty() {
        lines.push(current.trim_end().to_string());
    }
    lines
}

/// Byte index of the longest prefix of `text` at most `width` columns wide.
fn cut_at_width(text: &str, width: usize) -> usize {
    let mut used = 0;
    for (index, ch) in text.char_indices() {
        let ch_width = unicode_width::UnicodeWidthChar::width(ch).unwrap_or(0);
        if used + ch_width > width {
            return index;
        }
        used += ch_width;
    }
    text.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wrap_keeps_words_and_width() {
        let lines = wrap("aaa bbb ccc ddd", "> ", "  ", 9);
        assert_eq!(lines, vec!["> aaa bbb", "  ccc ddd"]);
        let cut = wrap("abcdefghijkl", "", "", 5);
        assert_eq!(cut, vec!["abcde", "fghij", "kl"]);
        assert_eq!(wrap("", "fix: ", "", 80), vec!["fix:"]);
    }
}
