//! bytehist: a byte histogram, an example operation written in Rust.
//!
//! It reads its unit on stdin and writes one line per byte value that
//! occurs, `XX<TAB>COUNT`, XX the value in two lowercase hex digits, in
//! order of value. Lines of that form add up with the sumcounts example
//! (examples/ops/sumcounts), so a job over units of any split, merged with
//! `--merge reduce:sumcounts`, yields the histogram of its whole input.
//!
//! Parameter `CLASS`: `all` (the default) counts every byte, `text` only
//! printable ASCII, tab, newline and carriage return. Anything else exits
//! with code 2, naming the parameter, as a failed unit whose message the
//! job shows.
//!
//! Built with Debian's rustc and libstd-rust-dev-wasm32 (no cargo, no
//! crates: one file, offline), target wasm32-wasi (wasm32-wasip1 on Rust
//! 1.78 and later):
//!
//!     rustc --edition 2021 --target wasm32-wasi -C opt-level=3 -C strip=debuginfo \
//!         -o bytehist.wasm examples/ops/bytehist/main.rs
use std::env;
use std::io::{self, BufWriter, Read, Write};
use std::process::exit;

fn main() {
    let text_only = match env::var("CLASS") {
        Err(env::VarError::NotPresent) => false,
        Ok(v) if v.is_empty() || v == "all" => false,
        Ok(v) if v == "text" => true,
        Ok(v) => fail(2, &format!("CLASS={:?}: want all or text", v)),
        Err(e) => fail(2, &format!("CLASS: {}", e)),
    };
    let mut counts = [0u64; 256];
    let mut buf = vec![0u8; 64 << 10];
    let mut stdin = io::stdin().lock();
    loop {
        match stdin.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                for &b in &buf[..n] {
                    counts[b as usize] += 1;
                }
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => fail(1, &format!("read stdin: {}", e)),
        }
    }
    let stdout = io::stdout();
    let mut w = BufWriter::new(stdout.lock());
    for (v, &n) in counts.iter().enumerate() {
        if n == 0 || (text_only && !is_text(v as u8)) {
            continue;
        }
        if let Err(e) = writeln!(w, "{:02x}\t{}", v, n) {
            fail(1, &format!("write stdout: {}", e));
        }
    }
    if let Err(e) = w.flush() {
        fail(1, &format!("write stdout: {}", e));
    }
}

/// is_text reports whether b is printable ASCII, tab, newline or return.
fn is_text(b: u8) -> bool {
    (0x20..0x7f).contains(&b) || b == b'\t' || b == b'\n' || b == b'\r'
}

/// fail writes the message on stderr and exits with code.
fn fail(code: i32, msg: &str) -> ! {
    eprintln!("bytehist: {}", msg);
    exit(code)
}
