// threshold-alert, in AssemblyScript: a trigger on the puts under sensor/. A reading above
// the threshold (the key config/threshold, 30 when unset) appends an entry to the stream
// alerts:
//
//   FIRN.FUNCTION LOAD alert <threshold-alert.wasm>
//   FIRN.TRIGGER CREATE alerts ON PREFIX sensor/ CALL alert
//
// It can be tried directly too: FCALL alert 1 sensor/7 31.5
// The same function as examples/functions/threshold-alert (Go), in a module of a few KB.

import { RunKind, argStrings, getString, keys, kind, log, xadd } from "@firn/functions";

const DEFAULT_THRESHOLD: f64 = 30.0;

export function run(): i32 {
  const k = kind();
  if (k != RunKind.Put && k != RunKind.Call) {
    return 0; // a deleted reading is not above anything
  }
  const ks = keys();
  const values = argStrings();
  if (ks.length != 1 || values.length != 1) {
    log(`threshold-alert: wants one key and one value; got ${ks.length} and ${values.length}`);
    return 1;
  }
  const key = ks[0];
  const text = values[0].trim();
  const reading = parseNumber(text);
  if (isNaN(reading)) {
    // Failing sends the input to the trigger's dead-letter stream, where it can be seen.
    log(`threshold-alert: ${key} is "${text}", not a number`);
    return 1;
  }
  // config/threshold as it was when the reading was written (a run reads at its input's
  // stamp), so running the trigger again over history raises the same alerts.
  const configured = getString("config/threshold");
  const readError = configured.error;
  if (readError !== null) {
    log(`threshold-alert: ${readError.toString()}`);
    return 1;
  }
  let limit = DEFAULT_THRESHOLD;
  const limitText = configured.value;
  if (limitText !== null) {
    limit = parseNumber(limitText.trim());
    if (isNaN(limit)) {
      log(`threshold-alert: config/threshold is "${limitText}", not a number`);
      return 1;
    }
  }
  if (reading <= limit) {
    return 0;
  }
  const err = xadd("alerts", ["sensor", key, "value", text]);
  if (err !== null) {
    log(`threshold-alert: ${err.toString()}`);
    return 1;
  }
  return 0;
}

/** A decimal number — an optional sign, digits with an optional fraction, an optional
 * exponent — or NaN for anything else: parseFloat alone reads "31abc" as 31, and a reading
 * must be a number through and through. */
function parseNumber(s: string): f64 {
  let i = 0;
  const n = s.length;
  if (i < n && (s.charCodeAt(i) == 0x2b || s.charCodeAt(i) == 0x2d)) i++; // + -
  let digits = 0;
  while (i < n && isDigit(s.charCodeAt(i))) {
    i++;
    digits++;
  }
  if (i < n && s.charCodeAt(i) == 0x2e) {
    // .
    i++;
    while (i < n && isDigit(s.charCodeAt(i))) {
      i++;
      digits++;
    }
  }
  if (digits == 0) return NaN;
  if (i < n && (s.charCodeAt(i) == 0x65 || s.charCodeAt(i) == 0x45)) {
    // e E
    i++;
    if (i < n && (s.charCodeAt(i) == 0x2b || s.charCodeAt(i) == 0x2d)) i++;
    let exponentDigits = 0;
    while (i < n && isDigit(s.charCodeAt(i))) {
      i++;
      exponentDigits++;
    }
    if (exponentDigits == 0) return NaN;
  }
  if (i != n) return NaN;
  return parseFloat(s);
}

function isDigit(c: i32): bool {
  return c >= 0x30 && c <= 0x39;
}
