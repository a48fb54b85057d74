// Package site renders converge's state as a static web site a person can
// watch converge: an index of revisions with their commit statuses, roots
// with rollup counts and phase totals; paginated lists of resources by kind
// and phase; a section per resource (spec, status, owner, children, edges
// with value flows, events) on one of its kind's resource pages; an SVG
// composition graph per root; and a small summary.json that open pages
// poll to update their counts, and to refetch themselves when the site
// changed, without a reload.
//
// Read first: Reader (what the site reads; *state.Store implements it),
// Builder (Build writes everything, Update rewrites what changed) and
// Handler (serves a built directory). Live keeps a built site current
// while the store changes (serve's): a build, then Builder.Update of the
// resources it is told changed, in bounded chunks. Actions is the write
// side that `converge serve --ui-actions` adds beside Handler: a sign-in
// with a login token, a session cookie and CSRF token, and an Actor (the
// admin API's controller) that deletes a resource or runs a verb.
//
// # Basics
//
// Every page is rendered with html/template; SVG text is XML-escaped. Links
// are relative, so the directory works from any static host and from
// file://. File names are stable: r/KIND/SHARD.html#NAME (see below),
// graph/KIND/NAME.svg, groups/KIND/NAME.html, kinds/KIND.html (kinds/KIND-p2.html …, PageSize
// rows a page), kinds/KIND.PHASE.html (paginated the same way),
// phases/PHASE.html (one page: the first rows and links to that phase by
// kind), index.html, summary.json (the totals and at most Options.Roots
// roots), search.json (SearchIndex: each kind's list pages and the first
// name on each, what every page's search box reads), assets/site.css and assets/site.js (the only script: it polls
// summary.json every second, swaps in the page's new header and main when
// summary.json names a newer build, marks a resource deleted while its
// page is open, announces changes in an aria-live region, and shows a
// resource's actions panel when the server answers GET ui/session, which
// only `converge serve --ui-actions` does). Pages carry a
// Content-Security-Policy that allows only the site's own files. A kind or
// name that is not a plain DNS label (lowercase letters, digits, inner
// hyphens, at most 100 bytes) is stored under "_" and a hash of it
// instead, so no name can reach outside its directory.
//
// Resources are not one file each: a million files cost minutes of kernel
// time to create on ext4. A kind's resources are spread over Shards (4,096)
// pages by a hash of the name, so a resource's link (ResourcePath) depends
// on its ID alone and never moves; at up to a few thousand resources of a
// kind most pages hold one, at a million resources in the classic shape
// about 80. A page holds one section per resource and a table of
// contents; opened at a resource's fragment, the stylesheet shows that
// section alone (CSS :target and :has, no script needed). Lists and
// sections cap what they show, so no page passes 1 MB at a million
// resources: Children children and Children edges each way, the newest
// Events events, the first 64 KiB of a spec or status.
//
// Values at a kind's Secret paths are replaced by "(secret)" in spec and
// status, including values that a flow copies from a secret producer field
// into a consumer's spec; any secret string of three or more bytes is also
// replaced wherever it appears in text the site writes (reasons, errors,
// events, other resources' JSON). Provider configs are never read.
//
// A composition root's graph draws every node (columns by dependency
// depth, coloured by phase, each a link to its page) when its subtree has
// at most Options.GraphNodes resources, and one box per kind with phase
// counts otherwise, so a whole BOM stays a small SVG. Such a big root also
// gets groups by dependency to drill down into (groups/KIND/NAME.html and
// below, paginated): the connected parts of its subtree named after their
// hubs (a classic functional domain, after its transit gateway), each
// drawn node by node when small enough and otherwise cut again without
// its hub into subgroups listed with their resources (the domain's teams).
//
// # Caveats
//
// Build reads the store twice: a paged scan (Reader.ResourcesAfter) for
// its in-memory picture of every resource (phase, owner, edges, a short
// reason, secret values, the newest events), then a paged scan of each
// kind in ID order whose sections are rendered on every core and
// appended to their resource pages, which go to their files 32 KiB at a
// time (a page's resources are spread over its kind's IDs, so reading
// them page by page would cost a lookup each); it never holds every
// resource's spec in memory. It writes files in place (on a slow disk
// file creation dominates), leaving alone bytes a file already holds, and
// a reader may see a page half-written while it runs; Update reads the
// resources of the pages it rewrites by ID, and writes each file to a
// temporary name and renames it. Page headers show the counts of when the page was written; the
// script replaces them with summary.json's.
//
// Update trusts its caller to name every resource that changed, including
// both ends of a changed edge; a resource it is not told about keeps its
// page. Neighbour pages show links, not phases, so a phase change rewrites
// only the resource's own page (with the others sharing it), the list
// pages it appears on, its root's graph, the index and summary.json. A new secret value found by Update is
// scrubbed from the pages Update writes; pages written earlier are fixed by
// the next Build.
package site
