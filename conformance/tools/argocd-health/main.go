// argocd-health runs a resource health script through Argo CD's own Lua
// engine (util/lua, the code argocd-cm's resource.customizations.health
// reaches), so the script we ship is tested by what will run it.
//
// Usage: argocd-health SCRIPT OBJECT.json...
// Prints one JSON line per object: {"status": "...", "message": "..."}.
package main

import (
	"encoding/json"
	"fmt"
	"os"

	"github.com/argoproj/argo-cd/v3/util/lua"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

func main() {
	if len(os.Args) < 3 {
		fmt.Fprintln(os.Stderr, "usage: argocd-health SCRIPT OBJECT.json...")
		os.Exit(2)
	}
	script, err := os.ReadFile(os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	for _, path := range os.Args[2:] {
		raw, err := os.ReadFile(path)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		obj := &unstructured.Unstructured{}
		if err := obj.UnmarshalJSON(raw); err != nil {
			fmt.Fprintf(os.Stderr, "%s: %v\n", path, err)
			os.Exit(2)
		}
		hs, err := lua.VM{}.ExecuteHealthLua(obj, string(script))
		if err != nil {
			fmt.Fprintf(os.Stderr, "%s: %v\n", path, err)
			os.Exit(1)
		}
		line, _ := json.Marshal(map[string]string{"status": string(hs.Status), "message": hs.Message})
		fmt.Println(string(line))
	}
}
