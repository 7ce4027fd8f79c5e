module github.com/seed-008287da/sluice

go 1.26
