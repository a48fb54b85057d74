// Package rawjson is converge's one JSON layer: it checks a JSON document
// once, where it enters from outside, and then cuts the checked bytes
// without decoding them. Specs, statuses and compositions are JSON texts
// of up to megabytes read on every flow, recompose and delta of a
// million-resource tree, so the scheduler, the provider SDK, the CUE
// package and the site read them through these functions instead of
// decoding them with encoding/json.
//
// Read first: Check and CheckObject (the boundary), then Fields, Field
// and Elements (the cutters), Key, and Equal.
//
// # Policy
//
// One grammar, one depth limit, one answer for duplicate keys:
//
//   - The grammar is encoding/json's (RFC 8259): exactly one value,
//     surrounded by optional white space. Invalid UTF-8 inside strings is
//     accepted and reads as encoding/json decodes it (U+FFFD).
//   - Objects and arrays nest at most MaxDepth deep, encoding/json's own
//     limit. Every function here is bounded by it: none recurses deeper,
//     whatever the input (a 20 MB document of brackets is an error, never a
//     stack overflow).
//   - Check refuses an object that holds one key twice
//     (*DuplicateKeyError, naming the key and where it is). The boundary
//     is where outside input enters: a worker's status and the specs of
//     the children it composes (the scheduler's result checks). Declared
//     specs come from CUE, which refuses conflicting duplicate fields and
//     unifies equal ones, so they never hold one.
//   - The cutters read bytes that passed Check. They scan with the same
//     grammar and limit, so malformed bytes are an error, never a wrong
//     cut, but they do not look for duplicates again: bytes stored before
//     the boundary refused them read as encoding/json reads them (the last
//     one wins).
//
// Every function is fuzzed against encoding/json, invalid input included.
//
// # Caveats
//
// The cutters never copy: what they return are slices of their input.
// The store's row codec (state/internal/codec) keeps its own measured and
// fuzzed decoder for the row format it writes itself.
//
// It imports only the standard library, so that the scheduler, which
// imports no third-party module, may use it; it lives under proto because
// these documents are what the worker protocol carries, and outside an
// internal folder because every package that reads them imports it.
package rawjson
