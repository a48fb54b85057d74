// Package sync brings desired state from git to the scheduler. It reads a
// repository through go-git (trees and blobs at a revision, never a
// checkout), loads and validates each revision's documents with the cue
// package, and applies the newest good revision.
//
// Read first: Source (a repository and the branch it follows) and its FS
// (the documents of one revision as an fs.FS).
//
// The package is named sync after its folder; files that also need the
// standard library's sync import it as gosync.
package sync
