//! A generic call's types view checked against the TypeSpec the
//! implementation serves: names, instantiation and templates by identity.

use super::graph::{
    FieldSpec, Payload, Slot, SpecTerm, TOOL_OWNER, Template, TemplateKind, TypeSpec,
};
use super::read::{Graph, Parts};
use super::render::{render, render_named, render_with};
use super::shape::{Sink, ptr, ptr_i};
use std::collections::BTreeMap;

// ---------------------------------------------------------------------------
// A call view against the served TypeSpec.
// ---------------------------------------------------------------------------

/// How the served side of a comparison reads its Params.
#[derive(Clone, Copy)]
enum Env<'a> {
    /// Comparing a served Tool root with a view root: `Param(tool, k)` is
    /// the view's k-th binding (a view term, compared by view identity).
    Roots(&'a [Slot]),
    /// Comparing a served template's member with the matching view
    /// template's: `Param(served id, i)` must be `Param(view id, i)`.
    Templates { served: &'a str, view: &'a str },
}

struct Compare<'a> {
    served: &'a TypeSpec,
    view: &'a Graph,
    served_by_identity: BTreeMap<&'a str, &'a str>,
}

pub(super) fn check_against_served(parts: &Parts, served: &TypeSpec, sink: &mut Sink) {
    let cmp = Compare {
        served,
        view: &parts.graph,
        served_by_identity: served
            .declarations
            .iter()
            .map(|(id, t)| (t.identity.as_str(), id.as_str()))
            .collect(),
    };
    let bindings_ok = match &parts.generic_slots {
        Some(bindings) => match_names(
            bindings.iter().map(|b| b.name.as_str()),
            served.generic.iter().map(String::as_str),
            "/bindings",
            "binding",
            "type parameter",
            sink,
        ),
        None => false,
    };
    if let Some(params) = &parts.slots {
        match_names(
            params.iter().map(|p| p.name.as_str()),
            served.params.iter().map(|p| p.name.as_str()),
            "/params",
            "parameter",
            "parameter",
            sink,
        );
        // Types are compared only where the bindings line up, since every
        // Param of the served side reads through them.
        if let (true, Some(bindings)) = (bindings_ok, &parts.generic_slots) {
            let env = Env::Roots(bindings);
            for (i, (p, sp)) in params.iter().zip(&served.params).enumerate() {
                if p.name == sp.name {
                    cmp.root(&sp.ty, &p.ty, env, &format!("/params/{i}/type"), sink);
                }
            }
            if let Some(ok) = &parts.ok {
                cmp.root(&served.ok, ok, env, "/ok", sink);
            }
            if let Some(err) = &parts.err {
                cmp.root(&served.err, err, env, "/err", sink);
            }
        }
    }
    for (vid, vt) in &parts.graph.templates {
        if let Some(&sid) = cmp.served_by_identity.get(vt.identity.as_str())
            && let Some(st) = served.declarations.get(sid)
        {
            cmp.templates(sid, st, vid, vt, sink);
        }
    }
}

/// Names, count and order must match; returns whether they do.
fn match_names<'a>(
    got: impl ExactSizeIterator<Item = &'a str>,
    want: impl ExactSizeIterator<Item = &'a str>,
    at: &str,
    what: &str,
    served_what: &str,
    sink: &mut Sink,
) -> bool {
    let got: Vec<&str> = got.collect();
    let want: Vec<&str> = want.collect();
    let mut ok = true;
    if got.len() != want.len() {
        sink.err(
            at,
            format!(
                "{} {what}(s) given, but the served TypeSpec declares {} {served_what}(s): [{}]",
                got.len(),
                want.len(),
                want.join(", ")
            ),
        );
        ok = false;
    }
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        if g != w {
            sink.err(
                &format!("{at}/{i}/name"),
                format!("{what} \"{g}\" is not \"{w}\", the served {served_what} at this position"),
            );
            ok = false;
        }
    }
    ok
}

impl Compare<'_> {
    fn root(&self, s: &SpecTerm, v: &SpecTerm, env: Env<'_>, at: &str, sink: &mut Sink) {
        if let Err((at, message)) = self.agree(s, v, env, at) {
            sink.err(&at, message);
        }
    }

    /// Compares a served term (under `env`) with a view term; the first
    /// disagreement is reported at its place in the view term.
    fn agree(
        &self,
        s: &SpecTerm,
        v: &SpecTerm,
        env: Env<'_>,
        at: &str,
    ) -> Result<(), (String, String)> {
        let mismatch = || {
            Err((
                at.to_string(),
                format!(
                    "expected {} (the served signature instantiated with the bindings), found {}",
                    self.render_served(s, env),
                    render(v, &self.view.templates)
                ),
            ))
        };
        match (s, v) {
            (SpecTerm::Param { owner, index }, _) => match env {
                Env::Roots(bindings) => {
                    let bound = usize::try_from(*index).ok().and_then(|i| bindings.get(i));
                    match bound {
                        Some(b) if owner == TOOL_OWNER && b.ty == *v => Ok(()),
                        _ => mismatch(),
                    }
                }
                Env::Templates { served, view } => match v {
                    SpecTerm::Param {
                        owner: vo,
                        index: vi,
                    } if owner == served && vo == view && vi == index => Ok(()),
                    _ => mismatch(),
                },
            },
            (SpecTerm::Prim(a), SpecTerm::Prim(b)) if a == b => Ok(()),
            (SpecTerm::List(a), SpecTerm::List(b)) => self.agree(a, b, env, &ptr(at, "List")),
            (SpecTerm::Set(a), SpecTerm::Set(b)) => self.agree(a, b, env, &ptr(at, "Set")),
            (SpecTerm::Option(a), SpecTerm::Option(b)) => self.agree(a, b, env, &ptr(at, "Option")),
            (SpecTerm::Task(a), SpecTerm::Task(b)) => self.agree(a, b, env, &ptr(at, "Task")),
            (SpecTerm::Dict(sk, sv), SpecTerm::Dict(vk, vv)) => {
                self.agree(sk, vk, env, &format!("{at}/Dict/0"))?;
                self.agree(sv, vv, env, &format!("{at}/Dict/1"))
            }
            (SpecTerm::Tuple(a), SpecTerm::Tuple(b)) if a.len() == b.len() => {
                for (i, (x, y)) in a.iter().zip(b).enumerate() {
                    self.agree(x, y, env, &format!("{at}/Tuple/{i}"))?;
                }
                Ok(())
            }
            (
                SpecTerm::Function {
                    params: sp,
                    result: sr,
                },
                SpecTerm::Function {
                    params: vp,
                    result: vr,
                },
            ) if sp.len() == vp.len() => {
                for (i, (x, y)) in sp.iter().zip(vp).enumerate() {
                    self.agree(x, y, env, &format!("{at}/Function/params/{i}"))?;
                }
                self.agree(sr, vr, env, &format!("{at}/Function/result"))
            }
            (
                SpecTerm::Named {
                    declaration: sd,
                    args: sa,
                },
                SpecTerm::Named {
                    declaration: vd,
                    args: va,
                },
            ) => {
                let si = self
                    .served
                    .declarations
                    .get(sd)
                    .map(|t| t.identity.as_str());
                let vi = self.view.templates.get(vd).map(|t| t.identity.as_str());
                // A view template that failed to read was already reported.
                if vi.is_none() && self.view.keys.contains(vd) {
                    return Ok(());
                }
                if si.is_none() || si != vi || sa.len() != va.len() {
                    return mismatch();
                }
                for (i, (x, y)) in sa.iter().zip(va).enumerate() {
                    self.agree(x, y, env, &format!("{at}/Named/args/{i}"))?;
                }
                Ok(())
            }
            _ => mismatch(),
        }
    }

    /// A view template carrying a served template's identity must agree
    /// with it: name, ordinal, arity, opacity, kind and ordered members,
    /// docs ignored. Member terms are compared unsubstituted, references by
    /// identity, so recursion needs no unfolding: each referenced pair is
    /// itself checked by this same pass.
    fn templates(&self, sid: &str, st: &Template, vid: &str, vt: &Template, sink: &mut Sink) {
        let at = ptr("/declarations", vid);
        let who = format!("served declaration {}", st.identity);
        let mut field = |key: &str, ok: bool, served: String, view: String| {
            if !ok {
                sink.err(
                    &ptr(&at, key),
                    format!("{key} {view} does not agree with the {who} ({key} {served})"),
                );
            }
        };
        field("name", st.name == vt.name, st.name.clone(), vt.name.clone());
        field(
            "lexical_ordinal",
            st.lexical_ordinal == vt.lexical_ordinal,
            st.lexical_ordinal.to_string(),
            vt.lexical_ordinal.to_string(),
        );
        field(
            "generic",
            st.generic.len() == vt.generic.len(),
            format!("arity {}", st.generic.len()),
            format!("arity {}", vt.generic.len()),
        );
        field(
            "opaque",
            st.opaque == vt.opaque,
            st.opaque.to_string(),
            vt.opaque.to_string(),
        );
        if st.kind.tag() != vt.kind.tag() {
            field("kind", false, st.kind.tag().into(), vt.kind.tag().into());
            return;
        }
        if st.generic.len() != vt.generic.len() {
            return;
        }
        let env = Env::Templates {
            served: sid,
            view: vid,
        };
        let fields = |sf: &[FieldSpec], vf: &[FieldSpec], at: &str, sink: &mut Sink| {
            if sf.len() != vf.len() {
                sink.err(
                    at,
                    format!("{} field(s), but the {who} has {}", vf.len(), sf.len()),
                );
                return;
            }
            for (i, (a, b)) in sf.iter().zip(vf).enumerate() {
                let at_i = ptr_i(at, i);
                if a.name != b.name {
                    sink.err(
                        &ptr(&at_i, "name"),
                        format!("field \"{}\" is \"{}\" in the {who}", b.name, a.name),
                    );
                } else if let Err((p, m)) = self.agree(&a.ty, &b.ty, env, &ptr(&at_i, "type")) {
                    sink.err(&p, m);
                }
            }
        };
        match (&st.kind, &vt.kind) {
            (TemplateKind::Record(sf), TemplateKind::Record(vf)) => {
                fields(sf, vf, &ptr(&at, "fields"), sink)
            }
            (TemplateKind::Enum(sc), TemplateKind::Enum(vc)) => {
                let at_c = ptr(&at, "constructors");
                if sc.len() != vc.len() {
                    sink.err(
                        &at_c,
                        format!(
                            "{} constructor(s), but the {who} has {}",
                            vc.len(),
                            sc.len()
                        ),
                    );
                    return;
                }
                for (i, (a, b)) in sc.iter().zip(vc).enumerate() {
                    let at_i = ptr_i(&at_c, i);
                    if a.name != b.name {
                        sink.err(
                            &ptr(&at_i, "name"),
                            format!("constructor \"{}\" is \"{}\" in the {who}", b.name, a.name),
                        );
                        continue;
                    }
                    let at_p = ptr(&at_i, "payload");
                    match (&a.payload, &b.payload) {
                        (None, None) => {}
                        (Some(Payload::Positional(x)), Some(Payload::Positional(y)))
                            if x.len() == y.len() =>
                        {
                            for (j, (s, v)) in x.iter().zip(y).enumerate() {
                                let at_j = format!("{at_p}/positional/{j}");
                                if let Err((p, m)) = self.agree(s, v, env, &at_j) {
                                    sink.err(&p, m);
                                }
                            }
                        }
                        (Some(Payload::Named(x)), Some(Payload::Named(y))) => {
                            fields(x, y, &ptr(&at_p, "named"), sink)
                        }
                        _ => sink.err(
                            &at_p,
                            format!("payload of \"{}\" does not agree with the {who}", b.name),
                        ),
                    }
                }
            }
            _ => {}
        }
    }

    fn render_served(&self, s: &SpecTerm, env: Env<'_>) -> String {
        match env {
            Env::Roots(bindings) => {
                let args: Vec<SpecTerm> = bindings.iter().map(|b| b.ty.clone()).collect();
                // Rendered per node so that served references name served
                // templates and substituted bindings name view templates.
                render_with(s, &mut |t, out| match t {
                    SpecTerm::Param { owner, index } if owner == TOOL_OWNER => {
                        match usize::try_from(*index).ok().and_then(|i| args.get(i)) {
                            Some(b) => {
                                out.push_str(&render(b, &self.view.templates));
                                true
                            }
                            None => false,
                        }
                    }
                    SpecTerm::Named { declaration, .. } => {
                        render_named(declaration, &self.served.declarations, out);
                        false
                    }
                    _ => false,
                })
            }
            Env::Templates { .. } => render(s, &self.served.declarations),
        }
    }
}

#[cfg(test)]
mod tests;
