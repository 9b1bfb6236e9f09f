// Reference GPT-2 encodings from the npm package `gpt-3-encoder`, for
// tests/check_tokenizer_oracle.sh.
//
//   node gpt2_oracle.js PKG_DIR encode FILE
//       prints FILE's tokens (read as UTF-8), one per line
//   node gpt2_oracle.js PKG_DIR random N SEED OUT_FILE
//       writes N deterministic random strings to OUT_FILE, each followed by
//       a NUL byte, and prints each one's tokens on one line (space-separated)
//
// The package's encode() concatenates arrays once per pre-token, which is
// quadratic on a 1 MB file. For `encode` we therefore load the package's own
// Encoder.js with its internals (the regex `pat`, `bpe`, `encoder`,
// `byte_encoder`) exported, and run encode()'s three-line loop ourselves;
// that loop is checked against the package's encode() on the file's first
// 20000 characters and on every random string.
'use strict';
const fs = require('fs');
const path = require('path');
const Module = require('module');

function loadPackage(dir) {
  const file = path.join(path.resolve(dir), 'Encoder.js');
  const src = fs.readFileSync(file, 'utf8') +
    '\nmodule.exports.__internals = { pat, bpe, encoder, byte_encoder };\n';
  const m = new Module(file, module);
  m.filename = file;
  m.paths = Module._nodeModulePaths(path.dirname(file));
  m._compile(src, file);
  return m.exports;
}

function encodeLinear(pkg, text) {
  const { pat, bpe, encoder, byte_encoder } = pkg.__internals;
  const out = [];
  for (const match of text.matchAll(pat)) {
    const chars = Array.from(Buffer.from(match[0], 'utf8')).map(x => byte_encoder[x]).join('');
    for (const piece of bpe(chars).split(' ')) out.push(encoder[piece]);
  }
  return out;
}

function same(a, b) {
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return false;
  return true;
}

function check(pkg, text, what) {
  const want = pkg.encode(text), got = encodeLinear(pkg, text);
  if (!same(want, got)) {
    console.error(`gpt2_oracle: internal check failed: linear encoder differs from encode() on ${what}`);
    process.exit(3);
  }
  return want;
}

// xorshift32: deterministic, independent of node's Math.random
function rng(seed) {
  let s = (seed >>> 0) || 0x9e3779b9;
  return n => {
    s ^= s << 13; s >>>= 0;
    s ^= s >>> 17;
    s ^= s << 5; s >>>= 0;
    return s % n;
  };
}

const FRAGMENTS = [
  "'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "n't", "'", "''", "\"", '",","', '"],["', "'],['", '"},{"', '",,"',
  '."', ',",', '),"', '],"', "',\"'", ' ,"', '...', '--', '<|endoftext|>', 'http://x.y/z?a=1&b=2', '3.14', '1,000',
  'hello', 'Hello', ' world', 'THE', 'the', ' the', 'ing', 'tion', 'zzzzzzzz', 'aaaaaaaaaaaa', '          ',
  '\n\n', '\r\n', '\t\t', ' \n ', '  \t\n', '12345678901234567890', '٣٤٥', '１２３', 'Ⅻ', '²³', '½',
  'café', 'naïve', 'Straße', 'Ελληνικά', 'русский', '中文字符', '日本語のテキスト', '한국어', 'עברית', 'العربية',
  'हिन्दी', 'ไทย', 'e\u0301', '\u00a0', '\u2003', '\u3000', '\u2028', '\u2029', '\ufeff', '\u0085', '\u200b',
  '\u180e', '\u000b', '\u000c', '\u0001', '\u007f', '😀', '👍🏽', '👨‍👩‍👧', '🇫🇷', '𝔘𝔫𝔦𝔠𝔬𝔡𝔢', '\u{10348}', '\u{1F4A9}',
];
const RANGES = [ // [lo, hi] code point ranges to draw single characters from (old, stable blocks)
  [0x20, 0x7e], [0x20, 0x7e], [0x20, 0x7e], [0x09, 0x0d], [0xa0, 0xff], [0x100, 0x17f], [0x370, 0x3ff],
  [0x400, 0x4ff], [0x590, 0x5ff], [0x600, 0x6ff], [0x900, 0x97f], [0x2000, 0x206f], [0x2100, 0x214f],
  [0x3000, 0x303f], [0x3040, 0x30ff], [0x4e00, 0x9fa5], [0xac00, 0xd7a3], [0xff00, 0xffef], [0x1f300, 0x1f5ff],
  [0x1f600, 0x1f64f], [0x1d400, 0x1d4ff],
];

function randomString(next) {
  const parts = [];
  const n = next(40);
  for (let i = 0; i < n; i++) {
    const k = next(10);
    if (k < 4) {
      parts.push(FRAGMENTS[next(FRAGMENTS.length)]);
    } else if (k < 6) {
      parts.push(' '.repeat(1 + next(3)));
    } else {
      const [lo, hi] = RANGES[next(RANGES.length)];
      const len = 1 + next(6);
      for (let j = 0; j < len; j++) parts.push(String.fromCodePoint(lo + next(hi - lo + 1)));
    }
  }
  return parts.join('');
}

function main() {
  const [dir, mode, ...rest] = process.argv.slice(2);
  if (!dir || !mode) {
    console.error('usage: node gpt2_oracle.js PKG_DIR encode FILE | random N SEED OUT_FILE');
    process.exit(2);
  }
  const pkg = loadPackage(dir);
  if (mode === 'encode') {
    const text = fs.readFileSync(rest[0], 'utf8');
    check(pkg, text.slice(0, 20000), `the first 20000 characters of ${rest[0]}`);
    const toks = encodeLinear(pkg, text);
    process.stdout.write(toks.join('\n') + (toks.length ? '\n' : ''));
  } else if (mode === 'random') {
    const count = parseInt(rest[0], 10), next = rng(parseInt(rest[1], 10));
    const bufs = [], lines = [];
    for (let i = 0; i < count; i++) {
      const s = randomString(next);
      if (s.includes('\0')) throw new Error('generator produced a NUL');
      bufs.push(Buffer.from(s, 'utf8'), Buffer.from([0]));
      lines.push(check(pkg, s, `random string ${i}`).join(' '));
    }
    fs.writeFileSync(rest[2], Buffer.concat(bufs));
    process.stdout.write(lines.join('\n') + (lines.length ? '\n' : ''));
  } else {
    console.error(`gpt2_oracle: unknown mode ${mode}`);
    process.exit(2);
  }
}

main();
