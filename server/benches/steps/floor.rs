//! The floor of a durable W1 step on this machine, measured in the same run
//! as the rows it is the floor of: a program that makes a step's system
//! calls and does nothing else. Per step it writes 64 bytes to a Tool
//! process's stdin and reads its 64-byte answer (the Tool is this
//! executable as `STEPS --bench-floor-tool`, a read-then-write loop), then
//! commits as SQLite's WAL does for a W1 step: three frames (a 24-byte
//! header and a 16 KiB page each, one `pwrite` apiece) over blocks the file
//! already has, then one fsync.
//!
//! Two shapes: the commit on a writer thread of its own, handed over a
//! channel and answered over another (the shape of `flow serve`: its store
//! has one writer thread, and the Tool's answer arrives on an async
//! worker), and the commit on the thread that talks to the Tool (what one
//! thread would pay: two wake-ups fewer per step). The CPU is this
//! process's user + system time per step; the Tool process's is apart, as
//! in the W1 rows.

use std::io::{Read, Write};
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::mpsc::sync_channel;
use std::time::Instant;

/// The argument that makes this executable the floor's Tool process.
pub const ROLE: &str = "--bench-floor-tool";

/// A message to the Tool and its answer: about a W1 step's JSON-RPC line.
const MESSAGE: usize = 64;
/// SQLite's WAL frame: a header, then the page (the store's 16 KiB).
const FRAME_HEADER: usize = 24;
const PAGE: usize = 16 * 1024;
/// Frames a W1 step's commit writes (the facts table, its index, the
/// run's row: docs/service.md).
const FRAMES: usize = 3;
/// The file the frames go round in, written once before the first step.
const RING: usize = 4 << 20;

/// The Tool: answers each message with itself until its stdin closes.
pub fn serve() {
    let mut input = std::io::stdin().lock();
    let mut output = std::io::stdout().lock();
    let mut message = [0u8; MESSAGE];
    while input.read_exact(&mut message).is_ok() {
        if output
            .write_all(&message)
            .and_then(|()| output.flush())
            .is_err()
        {
            return;
        }
    }
}

/// Where the commit of a step runs.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    WriterThread,
    OneThread,
}

/// One shape's figures: wall µs per step, and this process's CPU over
/// its steps.
#[derive(Clone, Copy)]
pub struct Floor {
    pub us_per_step: f64,
    pub cpu: super::harness::Cpu,
    pub steps: usize,
}

impl Floor {
    /// User + system µs per step.
    pub fn cpu_us_per_step(&self) -> f64 {
        self.cpu.us_per_op(self.steps)
    }
}

/// The WAL-like file and where the next frame goes.
struct Wal {
    file: std::fs::File,
    at: usize,
}

impl Wal {
    fn commit(&mut self) {
        // Statics, not arrays filled on every commit: the floor makes the
        // step's system calls and nothing else.
        static HEADER: [u8; FRAME_HEADER] = [3; FRAME_HEADER];
        static PAGE_BYTES: [u8; PAGE] = [7; PAGE];
        let (header, page) = (&HEADER, &PAGE_BYTES);
        for _ in 0..FRAMES {
            if self.at + FRAME_HEADER + PAGE > RING {
                self.at = 0;
            }
            let at = self.at as u64;
            self.file.write_all_at(header, at).expect("write");
            self.file
                .write_all_at(page, at + FRAME_HEADER as u64)
                .expect("write");
            self.at += FRAME_HEADER + PAGE;
        }
        self.file.sync_all().expect("fsync");
    }
}

/// Runs `steps` floor steps of `shape` in `dir`.
pub fn measure(dir: &Path, shape: Shape, steps: usize) -> Floor {
    let path = dir.join("floor-wal");
    let file = std::fs::File::create(&path).expect("floor file");
    file.write_all_at(&vec![1u8; RING], 0).expect("write");
    file.sync_all().expect("fsync");
    let mut wal = Wal { file, at: 0 };
    let exe = std::env::current_exe().expect("this executable");
    let mut tool = Command::new(exe)
        .arg(ROLE)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("the floor's Tool process");
    let mut to_tool = tool.stdin.take().expect("stdin");
    let mut from_tool = tool.stdout.take().expect("stdout");
    let mut message = [0u8; MESSAGE];
    let mut round_trip = move || {
        to_tool.write_all(&message).expect("to the Tool");
        from_tool.read_exact(&mut message).expect("from the Tool");
    };
    let me = std::process::id();
    let (cpu0, t0) = (super::harness::cpu_of(me), Instant::now());
    match shape {
        Shape::OneThread => {
            for _ in 0..steps {
                round_trip();
                wal.commit();
            }
        }
        Shape::WriterThread => {
            let (commits, writer_rx) = sync_channel::<std::sync::mpsc::SyncSender<()>>(16);
            let writer = std::thread::spawn(move || {
                while let Ok(done) = writer_rx.recv() {
                    wal.commit();
                    let _ = done.send(());
                }
            });
            for _ in 0..steps {
                round_trip();
                let (done, committed) = sync_channel(1);
                commits.send(done).expect("to the writer");
                committed.recv().expect("from the writer");
            }
            drop(commits);
            writer.join().expect("the writer thread");
        }
    }
    let wall = t0.elapsed().as_secs_f64() * 1e6;
    let cpu = super::harness::cpu_of(me) - cpu0;
    drop(round_trip);
    let _ = tool.wait();
    let _ = std::fs::remove_file(&path);
    Floor {
        us_per_step: wall / steps as f64,
        cpu,
        steps,
    }
}
