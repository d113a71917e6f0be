//! Image token rules: the pixel size of an inline image, and what each provider charges for it.

use base64::Engine as _;

/// The width and height of an image given as a `data:` URL or bare base64 (PNG, GIF, JPEG,
/// WebP), or `None` when it cannot be read without fetching it.
pub(crate) fn data_dimensions(data: &str) -> Option<(u64, u64)> {
    let b64 = match data.strip_prefix("data:") {
        Some(rest) => rest.split_once(',')?.1,
        None => data,
    };
    // JPEG headers can sit past the first few kilobytes (EXIF); 64 KiB of base64 covers them.
    let head: String = b64
        .chars()
        .filter(|c| !c.is_whitespace() && *c != '=')
        .take(64 * 1024)
        .collect();
    // Cut as bytes: the text is the caller's and may hold a multi-byte character anywhere
    // (it then fails to decode: no size).
    let usable = head.len() / 4 * 4;
    let bytes = base64::engine::general_purpose::STANDARD_NO_PAD
        .decode(&head.as_bytes()[..usable])
        .ok()?;
    bytes_dimensions(&bytes)
}

/// The decoded size in bytes of base64 `data` (a `data:` URL or bare base64).
pub(crate) fn data_len(data: &str) -> u64 {
    let b64 = data
        .strip_prefix("data:")
        .and_then(|r| r.split_once(',').map(|x| x.1))
        .unwrap_or(data);
    (b64.len() as u64).saturating_mul(3) / 4
}

fn be16(b: &[u8], i: usize) -> Option<u64> {
    Some(u16::from_be_bytes([*b.get(i)?, *b.get(i + 1)?]) as u64)
}
fn le16(b: &[u8], i: usize) -> Option<u64> {
    Some(u16::from_le_bytes([*b.get(i)?, *b.get(i + 1)?]) as u64)
}
fn be32(b: &[u8], i: usize) -> Option<u64> {
    Some(u32::from_be_bytes(b.get(i..i + 4)?.try_into().ok()?) as u64)
}

fn bytes_dimensions(b: &[u8]) -> Option<(u64, u64)> {
    if b.starts_with(b"\x89PNG\r\n\x1a\n") {
        return Some((be32(b, 16)?, be32(b, 20)?));
    }
    if b.starts_with(b"GIF8") {
        return Some((le16(b, 6)?, le16(b, 8)?));
    }
    if b.starts_with(b"RIFF") && b.get(8..12) == Some(b"WEBP") {
        return match b.get(12..16)? {
            b"VP8 " => Some((le16(b, 26)? & 0x3fff, le16(b, 28)? & 0x3fff)),
            b"VP8L" => {
                let bits = u32::from_le_bytes(b.get(21..25)?.try_into().ok()?) as u64;
                Some(((bits & 0x3fff) + 1, ((bits >> 14) & 0x3fff) + 1))
            }
            b"VP8X" => {
                let w = u32::from_le_bytes([*b.get(24)?, *b.get(25)?, *b.get(26)?, 0]) as u64 + 1;
                let h = u32::from_le_bytes([*b.get(27)?, *b.get(28)?, *b.get(29)?, 0]) as u64 + 1;
                Some((w, h))
            }
            _ => None,
        };
    }
    if b.starts_with(&[0xff, 0xd8]) {
        let mut i = 2;
        while i + 9 < b.len() {
            if b[i] != 0xff {
                i += 1;
                continue;
            }
            let marker = b[i + 1];
            if marker == 0xff {
                i += 1;
                continue;
            }
            let len = be16(b, i + 2)? as usize;
            // A caller's bytes: every index is checked, every sum saturates.
            let is_sof = matches!(marker, 0xc0..=0xcf) && !matches!(marker, 0xc4 | 0xc8 | 0xcc);
            if is_sof {
                return Some((be16(b, i + 7)?, be16(b, i + 5)?));
            }
            i = i.saturating_add(2).saturating_add(len);
        }
    }
    None
}

/// OpenAI's image rule (the "calculating costs" section of the vision guide): `low` detail is
/// the base alone; otherwise the image is scaled to fit in 2048×2048, then its short side to
/// 768, and each 512-pixel tile costs `tile` on top of `base`.
pub(crate) fn openai_tile_tokens(
    width: u64,
    height: u64,
    low_detail: bool,
    base: u64,
    tile: u64,
) -> u64 {
    if low_detail {
        return base;
    }
    let (mut w, mut h) = (width.max(1) as f64, height.max(1) as f64);
    if w > 2048.0 || h > 2048.0 {
        let s = 2048.0 / w.max(h);
        w *= s;
        h *= s;
    }
    if w.min(h) > 768.0 {
        let s = 768.0 / w.min(h);
        w *= s;
        h *= s;
    }
    let tiles = ((w / 512.0).ceil() as u64) * ((h / 512.0).ceil() as u64);
    base.saturating_add(tile.saturating_mul(tiles))
}

/// The most an image of unknown size can cost under OpenAI's rule (768×2048: 8 tiles).
pub(crate) fn openai_tile_worst(base: u64, tile: u64) -> u64 {
    base.saturating_add(tile.saturating_mul(8))
}

/// The base and tile tokens of an OpenAI model, and whether the rule is documented as exact
/// for it (the 512-pixel tile models); other models are estimated with the same rule.
pub(crate) fn openai_image_rates(model: Option<&str>) -> (u64, u64, bool) {
    let id = model.unwrap_or("").rsplit('/').next().unwrap_or("");
    if id.starts_with("gpt-4o-mini") {
        (2833, 5667, true)
    } else if id.starts_with("gpt-4o")
        || id.starts_with("chatgpt-4o")
        || id.starts_with("gpt-4-turbo")
        || id.starts_with("gpt-4.5")
        || id == "gpt-4.1"
        || id.starts_with("gpt-4.1-20")
    {
        (85, 170, true)
    } else {
        (85, 170, false)
    }
}

/// Anthropic's rule: about width × height / 750 tokens, after scaling the long edge to at
/// most 1,568 pixels (so at most about 1,600 tokens).
pub(crate) fn anthropic_image_tokens(dims: Option<(u64, u64)>) -> u64 {
    match dims {
        Some((w, h)) => {
            let (mut w, mut h) = (w.max(1) as f64, h.max(1) as f64);
            let long = w.max(h);
            if long > 1568.0 {
                w *= 1568.0 / long;
                h *= 1568.0 / long;
            }
            let px = w * h;
            let px = if px > 1_150_000.0 { 1_150_000.0 } else { px };
            (px / 750.0).ceil() as u64
        }
        None => 1600,
    }
}

/// Gemini: 258 tokens for an image up to 384 pixels on both sides, else 258 per 768×768 tile.
pub(crate) fn gemini_image_tokens(dims: Option<(u64, u64)>) -> u64 {
    match dims {
        Some((w, h)) if w <= 384 && h <= 384 => 258,
        // Header sizes are the caller's: a fake PNG may claim 4-billion-pixel sides.
        Some((w, h)) => 258u64
            .saturating_mul(w.div_ceil(768).max(1))
            .saturating_mul(h.div_ceil(768).max(1)),
        None => 258 * 4,
    }
}
