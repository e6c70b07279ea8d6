//! Namespaces (issue 40 item 4, docs/custody.md "Namespaces"): every run
//! belongs to one, host metadata kept in the runs index beside its
//! history, never a fact. A caller confined to some namespaces reads only
//! their runs; the store filters its listings, counts and inbox by a
//! [`Namespaces`] set, each namespace an index range of its own.

use crate::error::{Error, Result};
use std::fmt;

/// A namespace's name: 1 to 64 of `a-z`, `0-9`, `-`, `_` and `.`,
/// starting with a letter or digit (`default`, `team-a`, `acme.prod`).
/// Lowercase only, so two spellings never name two namespaces.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Namespace(String);

impl Namespace {
    /// The namespace of a run nobody placed: `default`.
    pub const DEFAULT: &'static str = "default";

    /// The allowed form, for error messages.
    pub const FORM: &'static str =
        "1 to 64 of a-z, 0-9, '-', '_' and '.', starting with a letter or digit";

    pub fn parse(s: &str) -> Result<Namespace> {
        let ok = (1..=64).contains(&s.len())
            && s.bytes().next().is_some_and(|b| b.is_ascii_alphanumeric())
            && s.bytes().all(|b| {
                b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'-' | b'_' | b'.')
            });
        if ok {
            Ok(Namespace(s.to_string()))
        } else {
            Err(Error::InvalidArgument(format!(
                "{s:?} is not a namespace: {}",
                Self::FORM
            )))
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl Default for Namespace {
    fn default() -> Namespace {
        Namespace(Self::DEFAULT.to_string())
    }
}

impl fmt::Display for Namespace {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The namespaces a caller reads: every one (a server without tokens, an
/// `ns=*` token, the CLI on a local store), or only some.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Namespaces {
    #[default]
    All,
    /// Sorted, without repeats; may be empty (a caller that sees nothing).
    Only(Vec<Namespace>),
}

impl Namespaces {
    /// Only these (sorted and deduplicated here).
    pub fn only(names: impl IntoIterator<Item = Namespace>) -> Namespaces {
        let mut v: Vec<Namespace> = names.into_iter().collect();
        v.sort();
        v.dedup();
        Namespaces::Only(v)
    }

    /// Only `default`: what a token line without `ns=` reads.
    pub fn default_only() -> Namespaces {
        Namespaces::Only(vec![Namespace::default()])
    }

    pub fn contains(&self, ns: &Namespace) -> bool {
        match self {
            Namespaces::All => true,
            Namespaces::Only(v) => v.binary_search(ns).is_ok(),
        }
    }

    /// These, narrowed to `ns` when one is named (a query's `namespace=`
    /// filter): `ns` alone when it is here, nothing when it is not.
    pub fn narrowed(&self, ns: Option<&Namespace>) -> Namespaces {
        match ns {
            None => self.clone(),
            Some(n) if self.contains(n) => Namespaces::Only(vec![n.clone()]),
            Some(_) => Namespaces::Only(Vec::new()),
        }
    }

    /// Whether the two sets share a namespace (every one shares all but
    /// the empty set's): a worker serving `other` serves some run this
    /// caller sees.
    pub fn meets(&self, other: &Namespaces) -> bool {
        match (self, other) {
            (Namespaces::All, Namespaces::All) => true,
            (Namespaces::All, Namespaces::Only(v)) | (Namespaces::Only(v), Namespaces::All) => {
                !v.is_empty()
            }
            (Namespaces::Only(v), Namespaces::Only(w)) => v.iter().any(|n| w.contains(n)),
        }
    }

    /// The namespaces a query's SQL names: `None` for every one.
    pub(crate) fn listed(&self) -> Option<&[Namespace]> {
        match self {
            Namespaces::All => None,
            Namespaces::Only(v) => Some(v),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_have_one_form() {
        for ok in ["default", "team-a", "a", "acme.prod_2", "0team"] {
            assert_eq!(Namespace::parse(ok).unwrap().as_str(), ok);
        }
        for bad in ["", "Team", "-a", ".a", "a b", "a/b", "*", &"a".repeat(65)] {
            let e = Namespace::parse(bad).unwrap_err().to_string();
            assert!(e.contains("a-z, 0-9"), "{bad}: {e}");
        }
    }

    #[test]
    fn a_set_narrows_to_what_it_holds() {
        let a = Namespace::parse("a").unwrap();
        let b = Namespace::parse("b").unwrap();
        let only_a = Namespaces::only([a.clone(), a.clone()]);
        assert_eq!(only_a, Namespaces::Only(vec![a.clone()]));
        assert!(only_a.contains(&a) && !only_a.contains(&b));
        assert_eq!(only_a.narrowed(Some(&b)), Namespaces::Only(Vec::new()));
        assert_eq!(
            Namespaces::All.narrowed(Some(&b)),
            Namespaces::only([b.clone()])
        );
        assert!(Namespaces::All.contains(&a));
        let none = Namespaces::only([]);
        assert!(only_a.meets(&Namespaces::only([b.clone(), a.clone()])));
        assert!(!only_a.meets(&Namespaces::only([b.clone()])));
        assert!(only_a.meets(&Namespaces::All) && Namespaces::All.meets(&only_a));
        assert!(!none.meets(&Namespaces::All) && !Namespaces::All.meets(&none));
    }
}
