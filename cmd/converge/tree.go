package main

import (
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/spf13/cobra"

	"github.com/convergehq/converge"
)

func newTreeCommand(g *globals) *cobra.Command {
	var output string
	var depth int
	c := &cobra.Command{
		Use:   "tree KIND/NAME",
		Short: "Show a resource's composition tree with phases and dependencies",
		Args:  cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			return withResource(g, c.ErrOrStderr(), output, args[0], func(rd reader, id converge.ID) error {
				root, err := buildTree(rd, id, depth)
				if err != nil {
					return err
				}
				if output != "table" {
					return writeData(c.OutOrStdout(), output, root)
				}
				printTree(c.OutOrStdout(), root, "", true, true)
				return nil
			})
		},
	}
	c.Flags().IntVar(&depth, "depth", 0, "levels to show below the resource (0: all)")
	addOutputFlag(c, &output, "table")
	return c
}

type treeNode struct {
	ID        converge.ID    `json:"id"`
	Version   int            `json:"kind_version"`
	Phase     converge.Phase `json:"phase"`
	Reason    string         `json:"reason,omitempty"`
	DependsOn []converge.ID  `json:"depends_on,omitempty"`
	Children  []*treeNode    `json:"children,omitempty"`
}

func buildTree(rd reader, id converge.ID, depth int) (*treeNode, error) {
	r, err := rd.Resource(id)
	if err != nil {
		return nil, fmt.Errorf("get %s: %w", id, err)
	}
	n := &treeNode{ID: id, Version: r.KindVersion, Phase: r.Phase, Reason: r.Reason}
	consumes, _, err := rd.EdgesOf(id)
	if err != nil {
		return nil, err
	}
	for _, e := range consumes {
		n.DependsOn = append(n.DependsOn, e.Producer)
	}
	if depth == 1 {
		return n, nil
	}
	kids, err := rd.Children(id)
	if err != nil {
		return nil, err
	}
	sort.Slice(kids, func(i, j int) bool { return kids[i] < kids[j] })
	next := depth - 1
	if depth == 0 {
		next = 0
	}
	for _, k := range kids {
		kn, err := buildTree(rd, k, next)
		if err != nil {
			return nil, err
		}
		n.Children = append(n.Children, kn)
	}
	return n, nil
}

func printTree(w io.Writer, n *treeNode, prefix string, last, top bool) {
	branch, indent := "├── ", "│   "
	if last {
		branch, indent = "└── ", "    "
	}
	if top {
		branch, indent = "", ""
	}
	line := fmt.Sprintf("%s%s%s (v%d) %s", prefix, branch, n.ID, n.Version, n.Phase)
	if n.Reason != "" {
		line += ": " + n.Reason
	}
	if len(n.DependsOn) > 0 {
		deps := make([]string, len(n.DependsOn))
		for i, d := range n.DependsOn {
			deps[i] = string(d)
		}
		line += "  → " + strings.Join(deps, ", ")
	}
	fmt.Fprintln(w, line)
	for i, k := range n.Children {
		printTree(w, k, prefix+indent, i == len(n.Children)-1, false)
	}
}
