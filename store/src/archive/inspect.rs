//! `flow runs --runs DIR`: a directory of archives inspected with the
//! seed's discovery rules and bounds (4 MiB per component, a page read
//! ceiling, at most 10,000 entries), each run reported with its record and
//! problems rather than verified or imported.

use super::*;

/// The cumulative read budget of one inspected page.
struct Budget {
    left: u64,
}

enum Bounded {
    Bytes(Vec<u8>),
    Missing,
    Limited(String),
    Unreadable(String),
}

/// Reads one component under the seed's bounds: at most 4 MiB plus one
/// overflow-probe byte, and never past the page's remaining ceiling. Bytes
/// read count against the ceiling, partial bytes before an error included.
fn read_component(path: &Path, budget: &mut Budget) -> Bounded {
    match fs::symlink_metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Bounded::Missing,
        Err(e) => return Bounded::Unreadable(e.to_string()),
        Ok(m) if !m.is_file() => return Bounded::Unreadable("not a regular file".into()),
        Ok(_) => {}
    }
    let want = COMPONENT_LIMIT + 1;
    let allowed = want.min(budget.left);
    if allowed == 0 {
        return Bounded::Limited("the page's 16 MiB read ceiling is reached".into());
    }
    let mut buf = Vec::new();
    let result = fs::File::open(path).and_then(|f| {
        let mut t = f.take(allowed);
        let mut chunk = [0u8; 64 * 1024];
        loop {
            match t.read(&mut chunk) {
                Ok(0) => return Ok(()),
                Ok(k) => buf.extend_from_slice(&chunk[..k]),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    });
    budget.left -= buf.len() as u64;
    if let Err(e) = result {
        return Bounded::Unreadable(e.to_string());
    }
    if buf.len() as u64 == want {
        return Bounded::Limited("larger than the 4 MiB component limit".into());
    }
    if buf.len() as u64 == allowed && allowed < want {
        return Bounded::Limited("the page's 16 MiB read ceiling is reached".into());
    }
    Bounded::Bytes(buf)
}

fn problem(component: &str, status: ProblemStatus, detail: impl Into<String>) -> Option<Problem> {
    Some(Problem {
        component: component.into(),
        status,
        detail: detail.into(),
    })
}

fn inspect_run(dir: &Path, id: &str, budget: &mut Budget) -> DiscoveryRow {
    let mut row = DiscoveryRow {
        run: id.to_string(),
        history_present: false,
        record: RecordStatus::NotStarted,
        truncated: false,
        ending: None,
        entry: None,
        program: None,
        last_fact: None,
        host_decision: None,
        problem: None,
    };
    match fs::symlink_metadata(dir) {
        Ok(m) if m.is_dir() => {}
        Ok(_) => {
            row.record = RecordStatus::Unreadable;
            row.problem = problem("run", ProblemStatus::Unreadable, "not a directory");
            return row;
        }
        Err(e) => {
            row.record = RecordStatus::Unreadable;
            row.problem = problem("run", ProblemStatus::Unreadable, e.to_string());
            return row;
        }
    }
    let bytes = match read_component(&dir.join("history.jsonl"), budget) {
        Bounded::Missing => return row,
        Bounded::Bytes(b) => b,
        Bounded::Limited(why) => {
            row.history_present = true;
            row.record = RecordStatus::InspectionLimited;
            row.problem = problem("history.jsonl", ProblemStatus::InspectionLimited, why);
            return row;
        }
        Bounded::Unreadable(why) => {
            row.history_present = true;
            row.record = RecordStatus::Unreadable;
            row.problem = problem("history.jsonl", ProblemStatus::Unreadable, why);
            return row;
        }
    };
    row.history_present = true;
    let scan = scan_history(&bytes, Some(id), &mut |_, _| Ok(()));
    row.truncated = scan.truncated;
    if let Some((n, reason)) = scan.error {
        row.record = RecordStatus::Unreadable;
        row.problem = problem(
            "history.jsonl",
            ProblemStatus::Unreadable,
            format!("fact {n}: {reason}"),
        );
        return row;
    }
    let (Some(last), Some(first_value), Some(last_value)) =
        (scan.facts.last(), scan.first.as_ref(), scan.last.as_ref())
    else {
        return row;
    };
    let s = |v: Option<&Value>| v.and_then(Value::as_str).map(str::to_string);
    row.entry = match (
        s(first_value.pointer("/entry/module")),
        s(first_value.pointer("/entry/function")),
    ) {
        (Some(module), Some(function)) => Some(Entry { module, function }),
        _ => None,
    };
    row.program = s(first_value.get("program"));
    let last_ref = FactRef {
        n: last.n,
        hash: hash_text(&last.hash),
    };
    if last.kind == FactKind::End {
        row.record = RecordStatus::Complete;
        row.ending = match last_value.get("ending").and_then(Value::as_object) {
            Some(e) if e.contains_key("Completed") => Some(Ending::Completed),
            Some(e) if e.contains_key("Faulted") => Some(Ending::Faulted),
            _ => None,
        };
    } else {
        row.record = RecordStatus::Incomplete;
    }
    // Seed: "A recorded pause or halt contributes hostDecision only when its
    // head matches the inspected facts."
    match read_component(&dir.join("host.jsonl"), budget) {
        Bounded::Missing => {}
        Bounded::Bytes(b) => match String::from_utf8(b) {
            Ok(text) => {
                let mut decision = None;
                for (i, line) in text.split_inclusive('\n').enumerate() {
                    let Some(line) = line.strip_suffix('\n') else {
                        break;
                    };
                    match parse_host_line(line) {
                        Ok(r)
                            if matches!(r.kind(), HostRecordKind::Pause | HostRecordKind::Halt) =>
                        {
                            decision = Some(r)
                        }
                        Ok(_) => {}
                        Err(e) => {
                            row.problem = problem(
                                "host.jsonl",
                                ProblemStatus::Unreadable,
                                format!("line {}: {e}", i + 1),
                            );
                            decision = None;
                            break;
                        }
                    }
                }
                row.host_decision = decision
                    .filter(|r| r.head == last_ref)
                    .map(|r| HostDecision {
                        kind: r.kind(),
                        at_ms: r.at_ms,
                    });
            }
            Err(_) => row.problem = problem("host.jsonl", ProblemStatus::Unreadable, "not UTF-8"),
        },
        Bounded::Limited(why) => {
            row.problem = problem("host.jsonl", ProblemStatus::InspectionLimited, why)
        }
        Bounded::Unreadable(why) => {
            row.problem = problem("host.jsonl", ProblemStatus::Unreadable, why)
        }
    }
    row.last_fact = Some(last_ref);
    row
}

/// Inspects a directory of run archives (the logic behind `flow runs --runs
/// DIR`), following the seed's "Stored-run discovery" rules and bounds. It
/// loads no blob and changes nothing; a missing root is reported, never
/// created.
pub fn inspect_archives(root: &Path, query: &DiscoveryQuery) -> Result<DiscoveryPage> {
    let q = query.check()?;
    let mut page = DiscoveryPage {
        runs: Vec::new(),
        next_after: None,
        problems: Vec::new(),
    };
    let root_problem = |status, detail: String| Problem {
        component: "root".into(),
        status,
        detail,
    };
    match fs::metadata(root) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            page.problems.push(root_problem(
                ProblemStatus::NotCreated,
                format!("{} does not exist", root.display()),
            ));
            return Ok(page);
        }
        Err(e) => {
            page.problems
                .push(root_problem(ProblemStatus::Unreadable, e.to_string()));
            return Ok(page);
        }
        Ok(m) if !m.is_dir() => {
            page.problems.push(root_problem(
                ProblemStatus::Unreadable,
                "not a directory".into(),
            ));
            return Ok(page);
        }
        Ok(_) => {}
    }
    let entries = match fs::read_dir(root) {
        Ok(e) => e,
        Err(e) => {
            page.problems
                .push(root_problem(ProblemStatus::Unreadable, e.to_string()));
            return Ok(page);
        }
    };
    let mut names: Vec<String> = Vec::new();
    let mut examined = 0usize;
    for entry in entries {
        let entry = match entry {
            Ok(e) => e,
            Err(e) => {
                page.problems
                    .push(root_problem(ProblemStatus::Unreadable, e.to_string()));
                break;
            }
        };
        let name = entry.file_name();
        if name.as_encoded_bytes().first() == Some(&b'.') {
            continue;
        }
        if examined == MAX_ENTRIES {
            page.problems.push(root_problem(
                ProblemStatus::InspectionLimited,
                format!(
                    "more than {MAX_ENTRIES} entries; only the first {MAX_ENTRIES} were examined"
                ),
            ));
            break;
        }
        examined += 1;
        if let Some(n) = name.to_str() {
            names.push(n.to_string());
        }
    }
    let mut candidates: Vec<String> = names
        .into_iter()
        .filter(|n| RunId::parse(n).is_ok())
        .filter(|n| q.after.as_ref().is_none_or(|a| n.as_str() > a.as_str()))
        .collect();
    candidates.sort();
    let more = candidates.len() > q.limit as usize;
    let mut budget = Budget {
        left: PAGE_READ_CEILING,
    };
    for id in candidates.iter().take(q.limit as usize) {
        let dir: PathBuf = root.join(id);
        let row = inspect_run(&dir, id, &mut budget);
        if let Some(s) = q.state {
            // The state filter applies to what a directory can show.
            if row.state() != Some(s) {
                continue;
            }
        }
        page.runs.push(row);
    }
    if more {
        page.next_after = candidates.get(q.limit as usize - 1).cloned();
    }
    Ok(page)
}
