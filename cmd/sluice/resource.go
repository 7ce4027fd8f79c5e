package main

import (
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/resource"
)

func serviceResource(name string) *resource.Resource {
	return resource.NewSchemaless(attribute.String("service.name", name))
}
