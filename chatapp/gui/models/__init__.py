"""Models: File > Models (the library, load times kept) and the variant picker."""
