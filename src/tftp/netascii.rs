//! Netascii transfers (RFC 1350 / RFC 764): a [`FileHandle`] wrapper that
//! turns LF into CR LF and a bare CR into CR NUL as bytes are read.

use async_trait::async_trait;

use crate::files::FileHandle;

/// A file read in netascii (RFC 1350 / RFC 764): LF becomes CR LF and a
/// bare CR becomes CR NUL. Its size on the wire is unknown up front, so it
/// answers no `tsize`.
pub struct Netascii {
    inner: Box<dyn FileHandle>,
    raw: Vec<u8>,
    pos: usize,
    eof: bool,
    /// Second byte of a pair that did not fit in the last read.
    pending: Option<u8>,
}

impl Netascii {
    pub fn new(inner: Box<dyn FileHandle>) -> Netascii {
        Netascii {
            inner,
            raw: Vec::new(),
            pos: 0,
            eof: false,
            pending: None,
        }
    }
}

#[async_trait]
impl FileHandle for Netascii {
    fn size(&self) -> Option<u64> {
        None
    }

    async fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
        const RAW: usize = 4096;
        let mut n = 0;
        while n < out.len() {
            if let Some(b) = self.pending.take() {
                out[n] = b;
                n += 1;
                continue;
            }
            let Some(&b) = self.raw.get(self.pos) else {
                if self.eof {
                    break;
                }
                self.raw.resize(RAW, 0);
                let k = self.inner.read(&mut self.raw).await?;
                self.raw.truncate(k);
                self.pos = 0;
                self.eof = k < RAW;
                continue;
            };
            self.pos += 1;
            let (first, second) = match b {
                b'\n' => (b'\r', Some(b'\n')),
                b'\r' => (b'\r', Some(0)),
                other => (other, None),
            };
            out[n] = first;
            n += 1;
            self.pending = second;
        }
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::files::{FileSource, MemorySource};

    #[tokio::test]
    async fn netascii_translates_line_ends_across_reads() {
        let text = b"a\nb\rc\r\n".repeat(3000);
        let want: Vec<u8> = text
            .iter()
            .flat_map(|&b| match b {
                b'\n' => vec![b'\r', b'\n'],
                b'\r' => vec![b'\r', 0],
                o => vec![o],
            })
            .collect();
        for chunk in [1usize, 2, 3, 512, 5000] {
            let mem = MemorySource::new();
            mem.insert("t", text.clone());
            let mut h = Netascii::new(mem.open("t").await.unwrap());
            assert_eq!(h.size(), None);
            let mut got = Vec::new();
            let mut buf = vec![0u8; chunk];
            loop {
                let n = h.read(&mut buf).await.unwrap();
                got.extend_from_slice(&buf[..n]);
                if n < chunk {
                    break;
                }
            }
            assert_eq!(got, want, "chunk {chunk}");
        }
    }
}
