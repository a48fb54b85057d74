// Package sync brings desired state from git to the scheduler and reports
// the outcome back to git. It reads a repository through go-git (trees and
// blobs at a revision, never a checkout; a remote one through a bare mirror
// in the state directory), gives every new first-parent commit its verdict
// (validated with the cue package, linted against its parent and against
// the schemas in the store), applies the newest good revision unless the
// prune guard holds it, and writes each verdict as a git note under
// refs/notes/converge.
//
// Read first: Source (a repository and the branch it follows; FS gives the
// documents of one revision as an fs.FS), Syncer (Check, Apply, Advance)
// and Pass (one revision's verdict). Triggers live here too: WatchTree
// (fsnotify, dev mode) and Webhook (a push delivery from GitHub,
// Gitea/Forgejo or GitLab, verified their way). LintRange is `converge
// lint`'s walk: every first-parent commit of a range linted against its
// parent, and the range as a whole. Plan is `converge plan`'s pricing of a
// revision (the plan, its composers' dry runs, breaking changes, guards)
// against the store or a pull request's base; Review is what it shows.
// Package sync/forge posts the same
// verdicts to a forge's commit-status API; package sync/controlplane runs
// a Syncer inside the engine and the daemon's follow loop.
//
// Nothing here waits for ever: every clone, fetch and push of notes is
// bounded by the Source's timeout (SetTimeout, RemoteOptions.Timeout),
// every load of documents by Syncer.LoadTimeout, and each gives up at
// once when its context ends. One past its deadline is abandoned with an
// error wrapping ErrTimeout; it runs on in its own goroutine (go-git and
// CUE cannot always be interrupted) and the next one of its kind waits
// for it.
//
// The package is named sync after its folder; files that also need the
// standard library's sync import it as gosync.
package sync
