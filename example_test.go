package modrun_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"strings"

	"github.com/modrun/modrun"
)

// A story from the shipped MoD model, greedy (the default): the same text
// on every backend. Options{} runs on a Vulkan GPU when there is one and on
// the CPU otherwise.
func Example() {
	model, err := modrun.Open("models/tinystories-mod.gguf", modrun.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer model.Close()

	session := model.NewSession()
	defer session.Close()
	_, err = session.Generate(context.Background(), "Once upon", modrun.GenerateOptions{MaxTokens: 30},
		func(t modrun.Token) error {
			fmt.Print(t.Text) // the prompt's tokens come first, then the story's
			return nil
		})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println()
	// Output:
	// Once upon a time, there was a little girl named Lily. She loved to play outside in the park. One
}

// Streaming with routing: each token arrives with what every routed layer
// did with it. In this model about one token in ten goes through a routed
// block; the others skip it on the residual stream.
func ExampleSession_Generate_routing() {
	model, err := modrun.Open("models/tinystories-mod.gguf", modrun.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer model.Close()
	fmt.Println("routed layers:", model.Info().RoutedLayers)

	res, err := model.NewSession().Generate(context.Background(), "Once upon", modrun.GenerateOptions{MaxTokens: 16},
		func(t modrun.Token) error {
			var through []string
			for _, r := range t.Routes {
				if r.Selected {
					through = append(through, fmt.Sprint(r.Layer))
				}
			}
			if len(through) > 0 {
				fmt.Printf("%q went through layers %s\n", t.Text, strings.Join(through, ", "))
			}
			return nil
		})
	if err != nil {
		log.Fatal(err)
	}
	for _, l := range res.Layers {
		fmt.Printf("layer %d: %d of %d tokens\n", l.Layer, l.Selected, l.Seen)
	}
	// Output:
	// routed layers: [1 3 5 7]
	// "" went through layers 5
	// "Once" went through layers 5
	// "ir" went through layers 3, 7
	// " named" went through layers 5
	// "." went through layers 1, 5
	// layer 1: 1 of 18 tokens
	// layer 3: 1 of 18 tokens
	// layer 5: 4 of 18 tokens
	// layer 7: 1 of 18 tokens
}

// Cancelling the context stops the generation within one token; Generate
// returns the context's error and the session keeps what was delivered.
func ExampleSession_Generate_cancel() {
	model, err := modrun.Open("models/tinystories-mod.gguf", modrun.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer model.Close()

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var text strings.Builder
	res, err := model.NewSession().Generate(ctx, "Once upon", modrun.GenerateOptions{},
		func(t modrun.Token) error {
			text.WriteString(t.Text)
			if strings.HasSuffix(text.String(), "Lily") {
				cancel() // a user pressed stop, a window closed, a deadline passed...
			}
			return nil
		})
	fmt.Printf("%s\n%d new tokens, cancelled: %v\n", text.String(), res.Tokens, errors.Is(err, context.Canceled))
	// Output:
	// Once upon a time, there was a little girl named Lily
	// 12 new tokens, cancelled: true
}
