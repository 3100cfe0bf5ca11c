package modrun_test

import (
	"context"
	"fmt"
	"log"

	"github.com/modrun/modrun"
)

// A conversation of two turns. Reply gets the whole conversation each
// time; the session keeps its KV cache, so the second turn runs only what
// follows the first answer. The shipped story model has no chat template
// of its own, so one is named (a chat model's file carries its own: pass
// "").
func ExampleChat() {
	model, err := modrun.Open("models/tinystories-mod.gguf", modrun.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer model.Close()
	chat, err := model.NewChat("chatml")
	if err != nil {
		log.Fatal(err)
	}
	defer chat.Close()

	msgs := []modrun.Message{{Role: modrun.RoleSystem, Content: "You tell stories."}}
	for _, question := range []string{"Tell me a story.", "What happened next?"} {
		msgs = append(msgs, modrun.Message{Role: modrun.RoleUser, Content: question})
		res, err := chat.Reply(context.Background(), msgs, modrun.ChatOptions{
			GenerateOptions: modrun.GenerateOptions{MaxTokens: 12},
		}, nil) // a callback would stream the answer's tokens
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("%d prompt tokens: %q\n", res.PromptTokens, res.Reply)
		msgs = append(msgs, modrun.Message{Role: modrun.RoleAssistant, Content: res.Reply})
	}
	// Output:
	// 83 prompt tokens: "\"Hey,\" said Jacky"
	// 57 prompt tokens: "\"He,\" said Jacky."
}
