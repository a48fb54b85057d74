// Package cue loads a converge repository's documents and validates them
// with CUE. Its one job: turn the files under a directory of any fs.FS (a
// working tree, a git tree at a revision) into a converge.Desired plus a
// sorted list of findings, each naming file, line, column and field path.
//
// Read first: Load and Result (one pass over a directory), Sandbox (the
// same in a child process under a Budget), then Schemas (the
// compiled kind schemas, also rebuilt from the store with Compile), then
// Lint and LintTrees (breaking schema changes between two sets of kinds,
// a structural walk with its own rule ids). The compose fast path (a
// plain subset of CUE compiled to Go closures, always checked against
// CUE's evaluator by its corpus, fuzz targets and validate) starts at
// fastComposer and compileCompose in fastcompose.go, then composeCompiler
// (compile), fenv (evaluate) and sink (output); the fast schema check is
// fastNode in fastcheck.go.
//
// # Basics
//
// Every document says what it is with type: kind, resource, providerconfig
// or binding. A .cue file is one document, a .json file one, a .yaml file
// any number separated by ---. converge.cue at the root holds the repository
// settings. A kind's spec, status and config are CUE schemas, stored as
// self-contained CUE source (imports and helper definitions included) and
// compiled as closed definitions: unknown fields are rejected.
//
// # Caveats
//
// A cue.Context is not safe for concurrent use and may accumulate state.
// Schemas therefore validates through a small pool of evaluators (a context
// plus its compiled schemas), one goroutine at a time each, and drops each
// after recycleAfter validations (docs/BENCHMARKS.md).
//
// CUE evaluation cannot be interrupted, and a small .cue file can ask for
// an exponential amount of work. Load evaluates in the caller's process;
// untrusted repositories are loaded through a Sandbox, which evaluates in
// a child process under a Budget (time per file, memory, output) and
// reports a file over it as a finding (RuleBudget).
//
// When one struct has several violations, CUE may report only some of
// them; unknown fields are always reported (a second, shape-only check).
//
// cuelang.org/go is imported by this package only.
package cue
