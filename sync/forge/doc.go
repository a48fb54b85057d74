// Package forge posts converge's commit statuses to a forge's
// commit-status API, so a commit's validate, lint and sync verdicts show
// next to it on GitHub, Gitea, Forgejo or GitLab.
//
// Read first: Reporter (post one status for one commit), GitHub (GitHub,
// Gitea and Forgejo), GitLab, and Publisher (the queue between the sync
// loop and a Reporter). Commenter keeps converge plan's one comment per
// pull request (GitHub and Gitea issue comments, GitLab merge request
// notes), found again by its hidden Marker so a new push edits it.
//
// # Basics
//
// Every Reporter lists the statuses the forge already shows for the
// commit and skips a post when the newest one of the same context has the
// same state and description (as Flux's notification-controller does), so
// re-reporting is cheap and never piles up statuses. Descriptions are cut
// to 140 characters, ending in "…". Requests are retried with bounded
// exponential backoff on network errors, 5xx and 429; any other 4xx is a
// *StatusError that retrying cannot fix.
//
// A Publisher takes statuses without ever blocking its caller and posts
// them in order from its own goroutine; while the forge is down it keeps
// them and tries again later. The git notes under refs/notes/converge stay
// the source of truth: Publisher.Backfill posts whatever the forge is
// missing from a list of revision records.
//
// # Caveats
//
// GitHub keeps at most 1,000 statuses per commit and context; the skip of
// identical states keeps converge far below that. GitLab refuses a
// pending status after a pending or running one (400), so GitLab never
// re-posts pending. Only the standard library is used.
package forge
