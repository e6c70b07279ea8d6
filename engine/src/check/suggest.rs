//! "Did you mean": the nearest known name to a misspelt one, by edit
//! distance, for the checker's unknown-node, -tool and -agent messages
//! (issue 41 §8).

/// `" (did you mean `NAME`?)"` for the candidate nearest to `word` —
/// within a third of its length in edits (at least one) — or nothing. Ties
/// go to the first candidate in the order given (the checker gives them
/// sorted), so the message is the same on every run.
pub(super) fn did_you_mean<'a>(
    word: &str,
    candidates: impl IntoIterator<Item = &'a str>,
) -> String {
    let limit = (word.chars().count() / 3).max(1);
    let mut best: Option<(usize, &str)> = None;
    for c in candidates {
        let d = distance(word, c);
        if d <= limit && best.is_none_or(|(b, _)| d < b) {
            best = Some((d, c));
        }
    }
    best.map(|(_, c)| format!(" (did you mean `{c}`?)"))
        .unwrap_or_default()
}

/// The Levenshtein distance between `a` and `b`, by characters: the fewest
/// insertions, deletions and substitutions that make one the other.
fn distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    let mut row = vec![0; b.len() + 1];
    for (i, ca) in a.chars().enumerate() {
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let substitute = prev[j] + usize::from(ca != *cb);
            row[j + 1] = substitute.min(prev[j + 1] + 1).min(row[j] + 1);
        }
        std::mem::swap(&mut prev, &mut row);
    }
    prev[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn distances() {
        assert_eq!(distance("", ""), 0);
        assert_eq!(distance("kitten", "sitting"), 3);
        assert_eq!(distance("classify", "clasify"), 1);
        assert_eq!(distance("abc", ""), 3);
    }

    #[test]
    fn the_nearest_within_a_third_is_suggested() {
        let known = ["classify", "draft", "review"];
        assert_eq!(
            did_you_mean("clasify", known),
            " (did you mean `classify`?)"
        );
        assert_eq!(did_you_mean("reveiw", known), " (did you mean `review`?)");
        assert_eq!(did_you_mean("shipping", known), "");
        // A one-letter name still gets a one-edit suggestion.
        assert_eq!(did_you_mean("b", ["a", "c"]), " (did you mean `a`?)");
    }
}
