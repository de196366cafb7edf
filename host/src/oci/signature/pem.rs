//! PEM blocks (RFC 7468): the labels rustls-pemfile does not know
//! (`PUBLIC KEY`, `ENCRYPTED SIGSTORE PRIVATE KEY`) as well as certificates.

use base64::Engine as _;

/// One `-----BEGIN LABEL-----` … `-----END LABEL-----` block, decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Block {
    pub(crate) label: String,
    pub(crate) der: Vec<u8>,
}

/// Every block of `text`, in order; text outside blocks is ignored.
pub(crate) fn blocks(text: &[u8]) -> Result<Vec<Block>, String> {
    let text = std::str::from_utf8(text).map_err(|_| "the PEM text is not UTF-8".to_string())?;
    let mut out = Vec::new();
    let mut lines = text.lines().map(str::trim);
    while let Some(line) = lines.next() {
        let Some(label) = line
            .strip_prefix("-----BEGIN ")
            .and_then(|l| l.strip_suffix("-----"))
        else {
            continue;
        };
        let end = format!("-----END {label}-----");
        let mut body = String::new();
        let mut closed = false;
        for line in lines.by_ref() {
            if line == end {
                closed = true;
                break;
            }
            // RFC 1421 headers (`Proc-Type: …`) are not base64.
            if !line.contains(':') {
                body.push_str(line);
            }
        }
        if !closed {
            return Err(format!("the {label} block has no {end} line"));
        }
        let der = base64::engine::general_purpose::STANDARD
            .decode(body.as_bytes())
            .map_err(|e| format!("the {label} block is not base64: {e}"))?;
        out.push(Block {
            label: label.to_string(),
            der,
        });
    }
    Ok(out)
}

/// The DER of every `CERTIFICATE` block of `text`.
pub(crate) fn certificates(text: &[u8]) -> Result<Vec<Vec<u8>>, String> {
    Ok(blocks(text)?
        .into_iter()
        .filter(|b| b.label == "CERTIFICATE")
        .map(|b| b.der)
        .collect())
}

/// `der` as a PEM block with 64-character lines.
pub(crate) fn encode(label: &str, der: &[u8]) -> String {
    let body = base64::engine::general_purpose::STANDARD.encode(der);
    let mut out = format!("-----BEGIN {label}-----\n");
    for chunk in body.as_bytes().chunks(64) {
        out.push_str(&String::from_utf8_lossy(chunk));
        out.push('\n');
    }
    out.push_str(&format!("-----END {label}-----\n"));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_round_trip_and_skip_other_text() {
        let text = format!(
            "junk\n{}between\n{}",
            encode("PUBLIC KEY", &[1, 2, 3]),
            encode("CERTIFICATE", &[4; 100])
        );
        let found = blocks(text.as_bytes()).unwrap();
        assert_eq!(found.len(), 2);
        assert_eq!(found[0].label, "PUBLIC KEY");
        assert_eq!(found[0].der, [1, 2, 3]);
        assert_eq!(certificates(text.as_bytes()).unwrap(), vec![vec![4; 100]]);
    }

    #[test]
    fn an_unclosed_block_is_an_error() {
        let err = blocks(b"-----BEGIN PUBLIC KEY-----\nAQID\n").unwrap_err();
        assert!(err.contains("-----END PUBLIC KEY-----"), "{err}");
    }
}
