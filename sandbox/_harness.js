// effectagent Code Mode harness: the fixed entrypoint of one Deno pass.
//
// The host spawns `deno run <flags> harness.js` with no permissions. This file then:
//   1. writes the ready marker "EAHRDY01" on stdout (a warm-pool process stops here until used);
//   2. reads ONE start frame on stdin (4-byte big-endian length + JSON): the program source, the
//      per-pass nonce, the host-call names the program may use and its byte budgets;
//   3. evaluates the source (one async function expression) in the global scope and calls it with
//      a frozen, prototype-less `tools` object exposing exactly the allowed names;
//   4. reports the outcome with one final frame and waits for the host to kill the process.
// Frames to the host: 16-byte nonce, 1-byte kind, 4-byte big-endian length, body, newline.
//   L log (level byte + UTF-8 text)      C host call ("id\nname\n" + JSON argument)
//   A host-call argument over its budget ("name\nsize")
//   R result (JSON)     B result over its budget (decimal size)
//   T thrown value (JSON {name, message})   I invalid program (JSON {message})
// Replies from the host: 4-byte length + JSON {id, ok, value | error}.
//
// Robustness, not trust: the program shares this realm, so the harness captures every primitive it
// needs before the program runs, never looks anything up on a prototype the program can reach
// afterwards, keeps the nonce and its I/O handles in this module's closure, and removes the raw
// stdio handles from `Deno`. None of this is what keeps the host safe: the host validates every
// frame (nonce, kind, size, syntax) and treats anything else as a protocol violation.

const G = globalThis;
const ReflectApply = Reflect.apply;
const ReflectGetOwnPropertyDescriptor = Reflect.getOwnPropertyDescriptor;
const ObjectCreate = Object.create;
const ObjectDefineProperty = Object.defineProperty;
const ObjectFreeze = Object.freeze;
const ObjectGetPrototypeOf = Object.getPrototypeOf;
const ObjectKeys = Object.keys;
const JSONParse = JSON.parse;
const JSONStringify = JSON.stringify;
const StringCtor = String;
const StringSlice = String.prototype.slice;
const ErrorCtor = Error;
const TypeErrorCtor = TypeError;
const PromiseCtor = Promise;
const PromiseReject = Promise.reject;
const U8 = Uint8Array;
const TypedArrayPrototype = ObjectGetPrototypeOf(U8.prototype);
const TypedArraySet = TypedArrayPrototype.set;
const TypedArrayFill = TypedArrayPrototype.fill;
const TypedArrayLength = ReflectGetOwnPropertyDescriptor(TypedArrayPrototype, "length").get;
const TypedArrayBuffer = ReflectGetOwnPropertyDescriptor(TypedArrayPrototype, "buffer").get;
const TypedArrayByteOffset = ReflectGetOwnPropertyDescriptor(TypedArrayPrototype, "byteOffset").get;
const encoder = new TextEncoder();
const TextEncoderEncode = TextEncoder.prototype.encode;
const decoder = new TextDecoder("utf-8", { fatal: true });
const TextDecoderDecode = TextDecoder.prototype.decode;
const AsyncFunctionPrototype = ObjectGetPrototypeOf(async function () {});
const indirectEval = G.eval;
const inspect = Deno.inspect;
const stdin = Deno.stdin;
const stdout = Deno.stdout;
const stdinRead = stdin.read;
const stdoutWriteSync = stdout.writeSync;
const exit = Deno.exit;

const u8len = (bytes) => ReflectApply(TypedArrayLength, bytes, []);
// A view made with the captured constructor: `subarray` would consult the (program-writable)
// `constructor` and `Symbol.species` and could hand the program the buffer behind the view.
const u8sub = (bytes, start, end) =>
  new U8(
    ReflectApply(TypedArrayBuffer, bytes, []),
    ReflectApply(TypedArrayByteOffset, bytes, []) + start,
    end - start,
  );
const u8set = (target, source, offset) => ReflectApply(TypedArraySet, target, [source, offset]);
const utf8 = (text) => ReflectApply(TextEncoderEncode, encoder, [text]);
const slice = (text, start, end) => ReflectApply(StringSlice, text, [start, end]);

// ---- writing frames (synchronous: frames never interleave, whatever the program awaits) ----

let nonce = null; // 16 bytes, known only after the start frame

function writeAll(bytes) {
  const total = u8len(bytes);
  let offset = 0;
  while (offset < total) {
    const view = offset === 0 ? bytes : u8sub(bytes, offset, total);
    offset += ReflectApply(stdoutWriteSync, stdout, [view]);
  }
}

// Deno's stdout is line-buffered: a write is split after its last newline and the rest flushed
// by a second write. Ending every frame with a newline makes it one write, so the host never
// wakes up for half a frame.
function sendFrame(kind, body) {
  const size = u8len(body);
  const frame = new U8(22 + size);
  for (let i = 0; i < 16; i++) frame[i] = nonce[i];
  frame[16] = kind;
  frame[17] = (size >>> 24) & 255;
  frame[18] = (size >>> 16) & 255;
  frame[19] = (size >>> 8) & 255;
  frame[20] = size & 255;
  u8set(frame, body, 21);
  frame[21 + size] = 10;
  writeAll(frame);
}

const KIND_LOG = 0x4c; // L
const KIND_CALL = 0x43; // C
const KIND_CALL_TOO_LARGE = 0x41; // A
const KIND_RESULT = 0x52; // R
const KIND_RESULT_TOO_LARGE = 0x42; // B
const KIND_THREW = 0x54; // T
const KIND_INVALID = 0x49; // I

// The outcome is the last thing the harness does: it then stops running JavaScript for good and
// waits for the host, which has all it needs, to kill the process. Exiting by itself would make
// bubblewrap exit before its sandbox init (see sandbox/_deno_workload.py).
const haltCell = new Int32Array(new SharedArrayBuffer(4));
const AtomicsWait = Atomics.wait;

function finish(kind, body) {
  sendFrame(kind, body);
  for (;;) ReflectApply(AtomicsWait, undefined, [haltCell, 0, 0]);
}

// ---- reading frames ----

let inBuf = new U8(1 << 16);
let inStart = 0;
let inEnd = 0;

async function fill(needed) {
  while (inEnd - inStart < needed) {
    if (inStart > 0) {
      u8set(inBuf, u8sub(inBuf, inStart, inEnd), 0);
      inEnd -= inStart;
      inStart = 0;
    }
    const capacity = u8len(inBuf);
    if (capacity < needed) {
      const grown = new U8(capacity * 2 > needed ? capacity * 2 : needed);
      u8set(grown, u8sub(inBuf, 0, inEnd), 0);
      inBuf = grown;
    }
    const count = await ReflectApply(stdinRead, stdin, [u8sub(inBuf, inEnd, u8len(inBuf))]);
    if (count === null) return false;
    inEnd += count;
  }
  return true;
}

async function readMessage() {
  if (!(await fill(4))) return null;
  const size =
    inBuf[inStart] * 16777216 +
    (inBuf[inStart + 1] << 16) +
    (inBuf[inStart + 2] << 8) +
    inBuf[inStart + 3];
  inStart += 4;
  if (!(await fill(size))) return null;
  const text = ReflectApply(TextDecoderDecode, decoder, [u8sub(inBuf, inStart, inStart + size)]);
  inStart += size;
  return JSONParse(text);
}

// ---- set-up that needs no start message (done while a warm workload waits) ----

let logBudget = -1; // set from the start message
let argumentBudget = 0;
let resultBudget = 0;
const MESSAGE_CHARS = 4096;
const NAME_CHARS = 256;

// Raw stdio stays reachable only through the references captured above.
delete Deno.stdin;
delete Deno.stdout;
delete Deno.stderr;
delete Deno.exit;
delete G.close;

// Uncaught errors in timers and unhandled rejections must not end the process before the result.
G.addEventListener("error", (event) => event.preventDefault());
G.addEventListener("unhandledrejection", (event) => event.preventDefault());

// -- console: every line becomes a log frame until the output budget is spent --

const LEVELS = ObjectFreeze({ debug: 0x64, info: 0x69, log: 0x6c, warn: 0x77, error: 0x65 });

function format(args) {
  let text = "";
  for (let i = 0; i < args.length; i++) {
    const arg = args[i];
    let piece;
    try {
      piece = typeof arg === "string" ? arg : inspect(arg, { colors: false, depth: 4 });
    } catch {
      piece = "[uninspectable]";
    }
    text = i === 0 ? piece : text + " " + piece;
  }
  return text;
}

function emitLog(level, args) {
  if (logBudget < 0) return;
  let text = format(args);
  // One code unit encodes to at least one byte: cutting at budget+1 units keeps the host able to
  // see that the budget was exceeded, without sending the whole line.
  if (text.length > logBudget + 1) text = slice(text, 0, logBudget + 1);
  const bytes = utf8(text);
  const size = u8len(bytes);
  const body = new U8(1 + size);
  body[0] = level;
  u8set(body, bytes, 1);
  sendFrame(KIND_LOG, body);
  logBudget -= size > 0 ? size : 1; // an empty line costs a byte, as on the host
}

const logAt = (level) => (...args) => emitLog(level, args);
const console_ = ObjectCreate(null);
for (const [name, level] of [
  ["log", LEVELS.log],
  ["info", LEVELS.info],
  ["debug", LEVELS.debug],
  ["trace", LEVELS.debug],
  ["dir", LEVELS.log],
  ["table", LEVELS.log],
  ["warn", LEVELS.warn],
  ["error", LEVELS.error],
]) {
  ObjectDefineProperty(console_, name, { value: ObjectFreeze(logAt(level)), enumerable: true });
}
ObjectDefineProperty(console_, "assert", {
  value: ObjectFreeze((condition, ...args) => {
    if (!condition) emitLog(LEVELS.error, ["Assertion failed:", ...args]);
  }),
  enumerable: true,
});
// Not frozen: Deno's Node compatibility layer adds its stream properties to the global console
// when it is set up. The methods above can be neither replaced nor removed.
ObjectDefineProperty(G, "console", { value: console_, writable: false, configurable: false });

// -- the `process` global --
// Deno sets up its Node compatibility layer on first use of `process`, which takes tens of
// milliseconds: it stays lazy, and once set up, writes to `process.stdout` and `process.stderr`
// are captured like console lines (a write ending with a newline is one line without it) instead
// of putting raw bytes where the frames go. (A program that imports "node:process" and writes to
// its stdout still breaks the protocol, which the host reports as such.)

const lenientDecoder = new TextDecoder();
const decodeLenient = (bytes) => ReflectApply(TextDecoderDecode, lenientDecoder, [bytes]);
const streamWriter = (level) =>
  ObjectFreeze((chunk, encoding, callback) => {
    let text;
    try {
      text = typeof chunk === "string" ? chunk : decodeLenient(chunk);
    } catch {
      text = StringCtor(chunk);
    }
    if (text.length > 0 && text[text.length - 1] === "\n") text = slice(text, 0, text.length - 1);
    emitLog(level, [text]);
    const done = typeof encoding === "function" ? encoding : callback;
    if (typeof done === "function") done();
    return true;
  });
const processAccessor = ReflectGetOwnPropertyDescriptor(G, "process");
let nodeProcess = null;

function setUpProcess() {
  if (nodeProcess === null) {
    nodeProcess = ReflectApply(processAccessor.get, G, []);
    for (const [stream, level] of [
      [nodeProcess.stdout, LEVELS.log],
      [nodeProcess.stderr, LEVELS.error],
    ]) {
      ObjectDefineProperty(stream, "write", { value: streamWriter(level), configurable: false });
    }
  }
  return nodeProcess;
}

if (processAccessor !== undefined && typeof processAccessor.get === "function") {
  ObjectDefineProperty(G, "process", {
    get: setUpProcess,
    set: processAccessor.set,
    enumerable: processAccessor.enumerable,
    configurable: true,
  });
}

// -- host calls --

const pending = ObjectCreate(null);
let nextId = 0;

function makeCaller(name) {
  const prefix = "\n" + name + "\n";
  return ObjectFreeze((argument) => {
    let json;
    try {
      json = JSONStringify(argument === undefined ? null : argument);
    } catch (error) {
      return ReflectApply(PromiseReject, PromiseCtor, [error]);
    }
    if (json === undefined) json = "null";
    const encoded = utf8(json);
    const size = u8len(encoded);
    if (size > argumentBudget) {
      sendFrame(KIND_CALL_TOO_LARGE, utf8(name + "\n" + size));
      return new PromiseCtor(() => {}); // the host ends the pass
    }
    nextId += 1;
    const id = nextId;
    return new PromiseCtor((resolve, reject) => {
      pending[id] = { resolve, reject };
      const head = utf8(id + prefix);
      const body = new U8(u8len(head) + size);
      u8set(body, head, 0);
      u8set(body, encoded, u8len(head));
      sendFrame(KIND_CALL, body);
    });
  });
}

function rejection(envelope) {
  const tag = StringCtor(envelope._tag);
  const error = new ErrorCtor(StringCtor(envelope.message));
  const keys = ObjectKeys(envelope);
  for (let i = 0; i < keys.length; i++) {
    ObjectDefineProperty(error, keys[i], {
      value: envelope[keys[i]],
      enumerable: true,
      writable: true,
      configurable: true,
    });
  }
  ObjectDefineProperty(error, "name", { value: tag, writable: true, configurable: true });
  return error;
}

async function serveReplies() {
  for (;;) {
    const reply = await readMessage();
    if (reply === null) exit(0); // the host hung up: nobody awaits this pass any more
    const slot = pending[reply.id];
    if (slot === undefined) continue;
    delete pending[reply.id];
    if (reply.ok) slot.resolve(reply.value);
    else slot.reject(rejection(reply.error));
    // One microtask tick before the next read: the awaiting program runs first and sends its next
    // call, and only then does the read wake Deno's reader thread (which, on a busy host, would
    // otherwise compete with the program for the CPU while the host waits for that call).
    await null;
  }
}

// ---- the pass ----

// Warm-up: before the ready marker, run the paths every pass takes (decoding and parsing a
// message, evaluating and running an async program that awaits, encoding a result, inspecting a
// value) so that V8's lazy compilation of them happens while a warm workload waits in the pool,
// not during its pass. It touches none of the state above.
async function warmUp() {
  const sample = utf8('{"nonce":"00","source":"async () => 0","tools":["f"],"output_bytes":1}');
  JSONParse(ReflectApply(TextDecoderDecode, decoder, [sample]));
  const program = indirectEval(
    "(async (tools) => {\n  let total = 0;\n  for (let i = 0; i < 2; i++) total += await tools.f({ a: total, b: i });\n  return total;\n}\n)",
  );
  const fake = ObjectFreeze({ f: (argument) => new PromiseCtor((resolve) => resolve(argument.b)) });
  utf8(JSONStringify(await program(fake)));
  inspect({ a: [1, "b"] }, { colors: false, depth: 4 });
}
await warmUp();

writeAll(utf8("EAHRDY01"));

const start = await readMessage();
if (start === null) exit(0);
ReflectApply(TypedArrayFill, inBuf, [0]); // the start message (nonce included) leaves no trace
inStart = 0;
inEnd = 0;
const hexDigit = (code) => (code <= 57 ? code - 48 : (code | 32) - 87);
nonce = new U8(16);
for (let i = 0; i < 16; i++) {
  nonce[i] = hexDigit(start.nonce.charCodeAt(2 * i)) * 16 + hexDigit(start.nonce.charCodeAt(2 * i + 1));
}
const source = start.source;
const allowed = start.tools;
argumentBudget = start.argument_bytes;
resultBudget = start.result_bytes;
logBudget = start.output_bytes;

const tools = ObjectCreate(null);
for (let i = 0; i < allowed.length; i++) {
  ObjectDefineProperty(tools, allowed[i], { value: makeCaller(allowed[i]), enumerable: true });
}
ObjectFreeze(tools);

// -- outcome reporting --

function bounded(value, limit) {
  let text;
  try {
    text = StringCtor(value);
  } catch {
    text = "[unprintable]";
  }
  return text.length > limit ? slice(text, 0, limit) + "…" : text;
}

function reportThrown(thrown) {
  let name = "Error";
  let message = "";
  try {
    if (thrown !== null && (typeof thrown === "object" || typeof thrown === "function")) {
      const n = thrown.name;
      name = typeof n === "string" ? n : "Error";
      message = thrown.message;
    } else {
      name = "Thrown" + (typeof thrown === "string" ? "String" : "Value");
      message = thrown;
    }
  } catch {
    message = "[a thrown value whose properties could not be read]";
  }
  // Strings only: JSON.stringify of an object would consult a polluted Object.prototype.toJSON.
  const body =
    '{"name":' +
    JSONStringify(bounded(name, NAME_CHARS)) +
    ',"message":' +
    JSONStringify(bounded(message, MESSAGE_CHARS)) +
    "}";
  finish(KIND_THREW, utf8(body));
}

function reportResult(value) {
  let json;
  try {
    json = JSONStringify(value === undefined ? null : value);
  } catch (error) {
    let reason = "";
    try {
      reason = StringCtor(error.message);
    } catch {
      // keep it empty
    }
    reportThrown(new TypeErrorCtor("the result is not JSON-serializable: " + bounded(reason, 512)));
    return;
  }
  if (json === undefined) json = "null";
  const encoded = utf8(json);
  if (u8len(encoded) > resultBudget) finish(KIND_RESULT_TOO_LARGE, utf8(StringCtor(u8len(encoded))));
  else finish(KIND_RESULT, encoded);
}

function invalid(message) {
  finish(KIND_INVALID, utf8('{"message":' + JSONStringify(bounded(message, MESSAGE_CHARS)) + "}"));
}

let program;
try {
  program = indirectEval("(" + source + "\n)");
} catch (error) {
  let name = "SyntaxError";
  let message = "";
  try {
    name = StringCtor(error.name);
    message = StringCtor(error.message);
  } catch {
    // keep the defaults
  }
  invalid(name + ": " + message);
}
if (typeof program !== "function" || ObjectGetPrototypeOf(program) !== AsyncFunctionPrototype) {
  invalid("the program must be one async function expression, such as `async (tools) => { ... }`");
}

serveReplies();
let outcome;
try {
  outcome = await program(tools);
} catch (thrown) {
  reportThrown(thrown);
}
reportResult(outcome);
